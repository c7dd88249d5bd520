"""The page's routes on the real service over HTTP: headers, 404s, the bounded page body."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import httpx
import orjson
import pytest

from sidecar.http.server import ServiceThread
from sidecar.http.settings import Secret, ServiceSettings
from sidecar.state.agents import agent_name
from sidecar.state.durations import DurationHistogram
from sidecar.web.data import OLDEST_LIMIT, UNHEALTHY_LIMIT
from sidecar.web.page import LIVE_CSP, asset_bytes

from .support import HOSTILE, SECOND_AGENT, T0, SidecarRun, feed


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SidecarRun]:
    with feed(tmp_path_factory.mktemp("routes"), hostile=True) as fed:
        fed.advance(batches=40)
        yield fed


class TestHtml:
    @pytest.mark.parametrize("path", ["/", "/runs/run-page"])
    def test_pages_carry_the_strict_policy(self, run: SidecarRun, path: str) -> None:
        response = run.client.get(path)
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/html; charset=utf-8"
        assert response.headers["content-security-policy"] == LIVE_CSP
        assert response.headers["x-content-type-options"] == "nosniff"
        assert '<script src="/static/page.js" defer></script>' in response.text

    @pytest.mark.parametrize("run_id", ["no-such-run", HOSTILE])
    def test_an_unknown_or_hostile_run_is_a_json_404(self, run: SidecarRun, run_id: str) -> None:
        response = run.client.get(f"/runs/{quote(run_id, safe='')}")
        assert response.status_code == 404
        assert response.headers["content-type"] == "application/json"
        assert response.json()["field"] == "run_id"


class TestStatic:
    def test_assets_are_served_from_the_package(self, run: SidecarRun) -> None:
        response = run.client.get("/static/page.js")
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/javascript; charset=utf-8"
        assert response.content == asset_bytes("page.js")
        assert run.client.get("/static/uPlot.min.css").headers["content-type"] == "text/css; charset=utf-8"

    @pytest.mark.parametrize("name", ["nope.js", "..%2Fpage.py", "%2Fetc%2Fpasswd"])
    def test_only_the_listed_assets_exist(self, run: SidecarRun, name: str) -> None:
        response = run.client.get(f"/static/{name}")
        assert response.status_code == 404
        assert response.headers["content-type"] == "application/json"


class TestPageBody:
    def test_is_bounded_and_lists_the_latest_unhealthy_rollouts(self, run: SidecarRun) -> None:
        body = run.get(f"/v1/runs/{run.run_id}/page")
        lines = run.client.get("/report/verdicts", params={"run_id": run.run_id}).content.splitlines()
        verdicts = [orjson.loads(line) for line in lines]
        rows = [row for row in verdicts if row["verdict"] == "unhealthy"]
        unhealthy = {
            (r["_ng_task_index"], r["_ng_rollout_index"]): [f["check"] for f in r["findings"]] for r in rows
        }
        # a duplicated identity's first copy was judged before its twin arrived: compared apart
        twins = {key for key, checks in unhealthy.items() if "rollout_duplicate_identity" in checks}
        assert len(rows) > UNHEALTHY_LIMIT  # the run is big enough to be cut
        listed = body["health"]["unhealthy"]
        assert len(listed) == UNHEALTHY_LIMIT and body["health"]["unhealthy_order"] == "latest"
        assert body["health"]["unhealthy_total"] == len(rows)
        shown = [(r["task_index"], r["rollout_index"]) for r in listed]
        for key, row in zip(shown, listed, strict=True):  # unhealthy in the report, same checks
            if key not in twins:
                assert unhealthy[key] == [f["check"] for f in row["findings"]]
        unreadable = {str(key[0]).rsplit("-", 1)[-1]: key for key in unhealthy if "unreadable" in str(key[0])}
        posted = [
            (e["row"]["_ng_task_index"], e["row"]["_ng_rollout_index"])
            if "row" in e
            else unreadable.get(str(e.get("line_number")))  # a torn line: its placeholder identity
            for e in run.posted
            if e["kind"] == "completed"
        ]
        latest = [key for key in reversed(posted) if key in unhealthy and key not in twins]
        single = [key for key in shown if key not in twins]
        assert single == latest[: len(single)]  # newest first
        assert len(body["inflight"]["oldest"]) <= OLDEST_LIMIT
        report = run.get("/report", run_id=run.run_id)
        assert body["accounting"] == report["accounting"]
        assert body["health"]["verdicts"] == report["quality_summary"]["run"]["verdicts"]
        assert body["latency"]["quantiles"] == report["latency"]["quantiles"]

    def test_perf_summary_is_the_reports_once_built(self, run: SidecarRun) -> None:
        body = run.get(f"/v1/runs/{run.run_id}/page")
        report = run.get("/report", run_id=run.run_id)
        assert body["perf_summary"] == report["perf_summary"] is not None
        assert body["perf_rollouts"] == report["quality_summary"]["run"]["artifacts"]["records"]

    def test_per_agent_figures_are_the_posted_rows(self, run: SidecarRun) -> None:
        """Two agents (one named with hostile text): each one's rollouts, failures, rate over the
        run's time, latency quantiles (from the same fixed buckets) and ng_perf sums, counted
        here from the events posted."""
        body = run.get(f"/v1/runs/{run.run_id}/page")
        rollouts: dict[str, int] = {}
        failed: dict[str, int] = {}
        latency: dict[str, DurationHistogram] = {}
        for event in run.posted:
            row = event.get("row")
            name = agent_name(row) if isinstance(row, dict) else None
            if name is None:
                continue
            if event["kind"] == "failed" or row.get("_ng_failure_class") is not None:
                failed[name] = failed.get(name, 0) + 1
            elif event["kind"] == "completed" and not row.get("_ng_no_persist"):
                rollouts[name] = rollouts.get(name, 0) + 1
                if event.get("seconds") is not None:
                    latency.setdefault(name, DurationHistogram()).observe(event["seconds"])
        assert sorted(rollouts) == sorted([HOSTILE, SECOND_AGENT]) and sum(failed.values()) > 0
        agents = {row["agent"]: row for row in body["agents"]}
        assert sorted(agents) == sorted(rollouts)
        # over the run's time: from its stamped start to its latest event's time (never arrival)
        elapsed = run.get(f"/v1/runs/{run.run_id}/timeline")["t"][-1] - T0
        for name, row in agents.items():
            assert row["other"] is False
            assert row["rollouts"] == rollouts[name] and row["failed"] == failed.get(name, 0)
            assert row["rollouts_per_hour"] == pytest.approx(rollouts[name] * 3600 / elapsed)
            assert row["latency_samples"] == latency[name].observations
            assert row["latency_p50_s"] == latency[name].quantile(0.5)
            assert row["latency_p95_s"] == latency[name].quantile(0.95)
        assert sum(row["prompt_tokens"] for row in agents.values()) == body["tokens"]["prompt"]
        assert sum(row["completion_tokens"] for row in agents.values()) == body["tokens"]["completion"]
        report = run.get("/report", run_id=run.run_id)
        assert sum(rollouts.values()) + sum(failed.values()) <= report["events"]["completed"] + sum(
            f["count"] for f in report["events"]["failed"]
        )

    def test_unknown_run_is_a_404(self, run: SidecarRun) -> None:
        response = run.client.get("/v1/runs/nope/page")
        assert response.status_code == 404 and response.json()["error"] == "unknown_run"


def test_reads_need_no_token(tmp_path: Path) -> None:
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3", token=Secret("s3cret"))
    with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        started = client.post(
            "/v1/runs/r/events", json=[{"kind": "run_started"}], headers={"Authorization": "Bearer s3cret"}
        )
        assert started.status_code == 200
        for path in ("/", "/runs/r", "/v1/runs/r/page", "/static/page.js"):
            assert client.get(path).status_code == 200, path


def test_the_page_body_is_built_off_the_event_loop(tmp_path: Path) -> None:
    """A run with a duplicate identity takes its health counts from the reducer's O(rollouts)
    summary: the page must compute them on a worker thread, never on the loop serving
    ``/drain_margin`` (at 100k tasks it held the loop for 650 ms)."""
    import asyncio

    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
    thread = ServiceThread(settings)
    with thread as url, httpx.Client(base_url=url, timeout=30) as client:
        rows = [  # two different rows claiming one identity
            {"_ng_task_index": 0, "_ng_rollout_index": 0, "response": {"output": []}, "reward": reward}
            for reward in (1.0, 0.0)
        ]
        events = [{"kind": "run_started"}] + [
            {"kind": "completed", "task_index": 0, "rollout_index": 0, "row": row} for row in rows
        ]
        assert client.post("/v1/runs/dup/events", json=events).status_code == 200
        assert thread.service is not None
        state = thread.service.ingestor.runs["dup"]
        assert state._maybe_duplicates  # the case whose counts are the reducer's summary
        on_loop: list[bool] = []
        original = state.health_view

        def recorded(*, fresh: bool = False) -> object:
            try:
                asyncio.get_running_loop()
                on_loop.append(True)
            except RuntimeError:  # a worker thread runs no event loop
                on_loop.append(False)
            return original(fresh=fresh)

        state.health_view = recorded  # type: ignore[method-assign]
        try:
            assert client.get("/v1/runs/dup/page").status_code == 200
        finally:
            del state.health_view  # (a snapshot pickles the state)
        assert on_loop == [False]
