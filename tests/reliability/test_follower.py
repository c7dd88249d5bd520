"""``rollout-sidecar follow`` over mangled files, SIGKILLed at random: report == batch."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest

from dispatcher_client.follow import Follower
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from tests.reliability_harness.follower import run_follower_trials
from tests.reliability_harness.sidecar_process import Launch
from tests.reliability_harness.workload import batch_files, generate_run, report_files

from .conftest import no_violations

pytestmark = pytest.mark.timeout(120)


class TestFollower:
    def test_partial_writes_recreation_resume_repair_and_kills(self, tmp_path: Path, launch: Launch) -> None:
        result = run_follower_trials(1, tmp_path, truncate="tail", launch=launch)
        no_violations(result.violations)
        assert result.follower_kills >= 1 and result.recreations == 1 and result.truncations == 1

    async def test_truncation_within_the_unsaved_window_after_a_crash(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        lines = generate_run("w", tmp_path / "gen", num_tasks=6, fault_rate=0.0, failure_rate=0.0).main_lines
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        rollouts = run_dir / "rollouts.jsonl"
        rollouts.write_bytes(b"".join(lines[:4]))
        with ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")) as url:
            first = Follower(run_dir, sidecar_url=url, run_id="w", poll_interval_s=0.01)
            async with first.client:
                await first.step()
                saved = tmp_path / "state-at-the-ack.json"
                flush = first.client.flush

                async def flush_then_snapshot(timeout_s: float | None = None) -> bool:
                    acknowledged = await flush(timeout_s)
                    shutil.copy(first.state_path, saved)  # the state file a SIGKILL here leaves
                    return acknowledged

                monkeypatch.setattr(first.client, "flush", flush_then_snapshot)
                with rollouts.open("ab") as handle:
                    handle.write(b"".join(lines[4:6]))
                await first.step()  # lines 5-6 acknowledged by the sidecar ...
            checkpoint = json.loads(saved.read_bytes())["files"]["rollouts"]["offset"]
            assert checkpoint == len(b"".join(lines[:4]))  # (the kill came before the checkpoint moved)
            shutil.copy(saved, first.state_path)  # ... but the follower died before checkpointing them
            with rollouts.open("r+b") as rewrite:  # the file is cut back to 4 lines and rewritten
                rewrite.truncate(sum(len(line) for line in lines[:4]))
                rewrite.seek(0, 2)
                rewrite.write(b"".join(lines[6:8]))
            second = Follower(run_dir, sidecar_url=url, run_id="w", poll_interval_s=0.01)
            async with second.client:
                await second.end_run()
            with httpx.Client(base_url=url, timeout=30) as client:
                files = report_files(client, "w")
        assert files == batch_files(run_dir)
