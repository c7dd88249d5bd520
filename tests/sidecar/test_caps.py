"""The service's configurable caps: each refusal names the cap and the option that raises it."""

from __future__ import annotations

from pathlib import Path

import httpx

from sidecar.server import ServiceThread
from sidecar.settings import ServiceSettings


def _settings(tmp_path: Path, **caps: object) -> ServiceSettings:
    return ServiceSettings(port=0, journal_path=tmp_path / "journal.sqlite3", **caps)  # type: ignore[arg-type]


class TestCaps:
    def test_plan_tasks_identity_length_and_runs(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, max_plan_tasks=3, max_identity_chars=8, max_runs=2)
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            big_plan = client.post(
                "/v1/runs/a/events", json=[{"kind": "run_started", "plan": {str(t): 1 for t in range(4)}}]
            )
            assert big_plan.status_code == 422
            assert (
                big_plan.json()["field"] == "events.0.plan"
                and "--max-plan-tasks" in big_plan.json()["detail"]
            )
            assert (
                client.post("/v1/runs/a/events", json=[{"kind": "run_started", "plan": {"0": 1}}]).status_code
                == 200
            )
            long_id = client.post(
                "/v1/runs/a/events", json=[{"kind": "completed", "row": {}, "task_index": "x" * 9}]
            )
            assert long_id.status_code == 422 and long_id.json()["field"] == "events.0.task_index"
            assert "--max-identity-chars" in long_id.json()["detail"]
            assert client.post("/v1/runs/b/events", json=[{"kind": "run_started"}]).status_code == 200
            third = client.post("/v1/runs/c/events", json=[{"kind": "run_started"}])
            assert third.status_code == 429 and "--max-runs" in third.json()["detail"]
            assert (
                client.post("/v1/runs/a/events", json=[{"kind": "run_started"}]).status_code == 200
            )  # held run
            assert [run["run_id"] for run in client.get("/v1/runs").json()["runs"]] == ["a", "b"]
