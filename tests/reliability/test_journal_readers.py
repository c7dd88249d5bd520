"""Regression: a reader in another process must not make the live WAL vanish under the writer.

Before the fix in ``sidecar.journal._schema`` (skip the in-process header read while our
writer holds the file), ``Journal.replay()`` at start-up dropped the writer's POSIX locks; the
next outside reader to close deleted the WAL, and every later acknowledged event was lost on
SIGKILL.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import pytest

from tests.reliability_harness.sidecar_process import Launch, SidecarProcess
from tests.reliability_harness.workload import generate_run, journal_keys

pytestmark = pytest.mark.timeout(60)


class TestOutsideReaders:
    def test_acked_events_survive_sigkill_after_an_outside_reader(
        self, tmp_path: Path, launch: Launch
    ) -> None:
        run = generate_run("readers", tmp_path / "run", num_tasks=10)
        journal = tmp_path / "journal.sqlite3"
        proc = SidecarProcess(journal, tmp_path / "sidecar.log", launch=launch)
        url = proc.start()
        half = len(run.events) // 2
        try:
            with httpx.Client(base_url=url, timeout=30) as client:
                for start in range(0, half, 4):
                    client.post("/v1/runs/readers/events", json=run.events[start : min(start + 4, half)])
                conn = sqlite3.connect(journal)  # an operator's sqlite3 shell, a backup tool
                assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == half
                conn.close()
                for start in range(half, len(run.events), 4):
                    response = client.post("/v1/runs/readers/events", json=run.events[start : start + 4])
                    assert response.status_code == 200
            assert journal.with_name(journal.name + "-wal").exists()
        finally:
            proc.kill()
        assert journal_keys(journal) == run.idempotency_keys()
