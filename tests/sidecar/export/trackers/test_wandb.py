"""W&B export in offline mode (nothing leaves the machine), read back from the run's own log."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import httpx
import orjson
import pytest

from sidecar.export.trackers import TrackerSettings
from sidecar.export.trackers.keys import STEP_KEY, UNHEALTHY_TABLE
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from tests.sidecar.export.trackers.conftest import wandb_run_dirs
from tests.sidecar.export.trackers.support import (
    RUN,
    assert_artifacts,
    expected_final,
    report_files,
    run_events,
    wait_for,
)
from tests.sidecar.export.trackers.wandb_records import read_run
from tests.sidecar.service_support import post_events

wandb = pytest.importorskip("wandb", reason="the wandb extra is not installed: pip install '.[wandb]'")


def _final_done(journal: Path, tracker: str) -> bool:
    side = journal.with_name(journal.name + ".trackers.sqlite3")
    if not side.exists():
        return False
    with sqlite3.connect(f"file:{side}?mode=ro", uri=True) as conn:
        row = conn.execute(
            "SELECT final FROM tracker_runs WHERE run_id=? AND tracker=?", (RUN, tracker)
        ).fetchone()
    return bool(row and row[0])


def test_live_steps_final_summary_table_and_artifacts_equal_the_report(
    tmp_path: Path, wandb_offline: Path
) -> None:
    journal = tmp_path / "journal.sqlite3"
    settings = ServiceSettings(
        port=0,
        journal_path=journal,
        health_metrics_interval_s=0.0,
        trackers=TrackerSettings(wandb_project="rollouts", interval_s=0.2),
    )
    run, started = run_events(seed=6)
    half = len(run.events) // 2
    with ServiceThread(settings) as base, httpx.Client(base_url=base, timeout=30) as http:
        post_events(http, RUN, [started, *run.events[:half]])
        wait_for(lambda: wandb_run_dirs(wandb_offline), "the offline run")
        post_events(http, RUN, [*run.events[half:]])
        post_events(http, RUN, [{"kind": "run_ended"}])
        wait_for(lambda: _final_done(journal, "wandb"), "the final summary")
        files = report_files(base, RUN, tmp_path / "report")
    (run_dir,) = wandb_run_dirs(wandb_offline)
    logged = read_run(run_dir)
    assert logged.run_id.startswith("rs-")

    steps = [row["_step"] for row in logged.history]
    assert steps == list(range(len(steps)))
    assert [row[STEP_KEY] for row in logged.history] == steps  # the sidecar's own step in every row
    assert len(steps) >= 2  # live steps, then the final one
    assert logged.step_metrics["rollout_sidecar/*"] == STEP_KEY  # plotted against the sidecar's step
    final_row = logged.history[-1]
    expected = expected_final(files)
    assert {k: v for k, v in final_row.items() if k.startswith("rollout_sidecar/final/")} == expected
    assert {k: v for k, v in logged.summary.items() if k.startswith("rollout_sidecar/final/")} == expected
    assert logged.config["rollout_sidecar/plan_rollouts"] == "30"
    assert logged.config["rollout_sidecar/wandb_version"] == wandb.__version__

    (report_artifact,) = [
        files for name, files in logged.artifacts.items() if name.startswith("rollout_sidecar-")
    ]
    assert_artifacts(report_artifact, files, RUN)
    unhealthy = orjson.loads(files["quality_summary.json"])["run"]["verdicts"]["unhealthy"]
    assert unhealthy > 0
    assert final_row[UNHEALTHY_TABLE + "/nrows"] == unhealthy
    (table,) = [f for name, f in logged.artifacts.items() if "unhealthy_rollouts" in name]
    (content,) = table.values()
    rows = orjson.loads(content)["data"]
    verdicts = [orjson.loads(line) for line in files["rollout_verdicts.jsonl"].splitlines()]
    assert sorted(row[2] for row in rows) == sorted(
        v["rollout_id"] for v in verdicts if v["verdict"] == "unhealthy"
    )
