"""``rollout-sidecar demo``: the whole mission end to end, and the pieces it is built from."""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from health.api import health_check_run_dir
from sidecar.cli import main
from sidecar.demo.run import (
    MEAN_TASK_SECONDS,
    REQUEST_FAILURES,
    DemoConfig,
    DispatchStats,
    _scrape,
    gym_failure_row,
    live_line,
    reply_for,
    run_demo,
)
from tests.sidecar.synthetic_support import SyntheticConfig, rollout_event, sample_task_seconds

REPO_ROOT = Path(__file__).resolve().parents[2]
SMALL_RUN = ("--duration", "4", "--tasks", "45", "--concurrency", "8", "--task-timeout", "20", "--seed", "11")


def _demo_command() -> list[str]:
    script = Path(sys.executable).parent / "rollout-sidecar"
    return [str(script)] if script.exists() else [sys.executable, "-m", "sidecar.cli"]


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


DemoRun = tuple[subprocess.CompletedProcess[str], Path]


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """One small demo run (a 4 s budget, 45 tasks x 4) shared by the end-to-end tests."""
    out = tmp_path_factory.mktemp("demo") / "out"
    completed = subprocess.run(
        [*_demo_command(), "demo", *SMALL_RUN, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=out.parent,
    )
    return completed, out


class TestDemoEndToEnd:
    def test_exits_zero_with_the_report(self, demo_run: DemoRun) -> None:
        completed, out = demo_run
        assert completed.returncode == 0, completed.stderr[-3000:]
        stdout = completed.stdout
        assert "1 simulated minute = 0.1 s real (x600)" in stdout
        assert "Rollout health: " in stdout
        assert "Per-task latency over " in stdout
        assert "Accounting: expected 180 = succeeded" in stdout and ": balances" in stdout
        assert f"report: {out.resolve() / 'report'}" in stdout
        assert "metrics.prom" in stdout and f"journal: {out.resolve() / 'journal.sqlite3'}" in stdout
        assert "Traceback" not in completed.stderr

    def test_the_sidecar_flags_a_straggler(self, demo_run: DemoRun) -> None:
        """The long tail of the small run always has rollouts past 2x p95 (or the 20 min timeout)."""
        completed, _ = demo_run
        found = re.search(r"stragglers: (\d+) in-flight rollouts flagged by the sidecar", completed.stdout)
        assert found is not None and int(found[1]) >= 1, completed.stdout[-3000:]
        progress = [line for line in completed.stdout.splitlines() if line.startswith("[sim ")]
        assert progress and all(re.search(r"\| stragglers \d+$", line) for line in progress)

    def test_live_lines_show_rate_quantiles_margin_and_health(self, demo_run: DemoRun) -> None:
        completed, _ = demo_run
        progress = [line for line in completed.stdout.splitlines() if line.startswith("[sim ")]
        assert len(progress) >= 2
        assert all("rollouts/h" in line and "drain margin" in line and "healthy" in line for line in progress)
        assert re.search(r"p50 [\d.]+ min p75 [\d.]+ min p95 [\d.]+ min", progress[-1]), progress[-1]
        assert "\x1b[" not in completed.stdout  # plain text

    def test_prints_the_live_page_and_writes_the_page_file(self, demo_run: DemoRun) -> None:
        completed, out = demo_run
        live = re.search(r"^Live page: (http://127\.0\.0\.1:\d+/runs/demo-[\d-]+)$", completed.stdout, re.M)
        assert live is not None, completed.stdout[:2000]
        page = (out / "report" / "run.html").read_text()
        assert '<script type="application/json" id="page-data">' in page
        assert f"page: {out / 'report' / 'run.html'} (one file, opens offline)" in completed.stdout

    def test_report_files_equal_the_batch_health_check_over_the_persisted_rows(
        self, demo_run: DemoRun, tmp_path: Path
    ) -> None:
        completed, out = demo_run
        assert completed.returncode == 0, completed.stderr[-3000:]
        report = out / "report"
        for name in ("quality_summary.json", "rollout_verdicts.jsonl", "report.json", "metrics.prom"):
            assert (report / name).is_file(), name
        batch = tmp_path / "batch"
        batch.mkdir()
        shutil.copy(out / "rollouts.jsonl", batch / "rollouts.jsonl")
        result = health_check_run_dir(batch)
        assert (batch / "quality_summary.json").read_bytes() == (report / "quality_summary.json").read_bytes()
        assert (batch / "rollout_verdicts.jsonl").read_bytes() == (
            report / "rollout_verdicts.jsonl"
        ).read_bytes()
        verdicts = result.summary["run"]["verdicts"]
        assert verdicts["healthy"] > 0 and verdicts["unhealthy"] > 0
        assert sum(verdicts.values()) == len(_lines(out / "rollouts.jsonl"))

    def test_persisted_rows_carry_ng_perf_and_real_trajectories(self, demo_run: DemoRun) -> None:
        _, out = demo_run
        rows = _lines(out / "rollouts.jsonl")
        assert rows and all("_ng_failure_class" not in row for row in rows)
        with_trajectory = [row for row in rows if isinstance(row.get("ng_trajectory"), dict)]
        assert with_trajectory
        assert sum("ng_perf" in row for row in with_trajectory) >= len(with_trajectory) * 0.8
        latencies = [row["ng_perf"]["total_latency_ms"] for row in rows if "ng_perf" in row]
        assert min(latencies) > 1000.0  # simulated: tasks take seconds to hours, never real milliseconds
        assert len(_lines(out / "rollouts_materialized_inputs.jsonl")) == 180

    def test_drain_margin_stopped_dispatch_near_the_end_of_the_budget(self, demo_run: DemoRun) -> None:
        _, out = demo_run
        dispatch = json.loads((out / "report" / "dispatch.json").read_text())
        report = json.loads((out / "report" / "report.json").read_text())
        budget = dispatch["budget_s"]
        assert budget == pytest.approx(4 * 600)
        first = dispatch["first_drain"]
        assert dispatch["drained"] > 0 and first is not None
        assert first["drain_margin_s"] is not None
        assert (
            first["time_left_s"] < first["drain_margin_s"]
        )  # stopped by the margin, before the budget ran out
        assert first["time_left_s"] > 0
        assert first["at_s"] > budget / 2
        assert dispatch["last_dispatch_at_s"] <= budget
        assert report["events"]["drained"] == dispatch["drained"]
        assert report["latency"]["drained"] == dispatch["drained"]

    def test_accounting_adds_up(self, demo_run: DemoRun) -> None:
        _, out = demo_run
        accounting = json.loads((out / "report" / "report.json").read_text())["accounting"]
        dispatch = json.loads((out / "report" / "dispatch.json").read_text())
        rows = _lines(out / "rollouts.jsonl")
        failures = _lines(out / "rollouts_failures.jsonl")
        assert accounting["expected"] == 180
        assert accounting["expected"] == sum(
            accounting[k] for k in ("succeeded", "failed", "drained", "missing")
        )
        assert accounting["missing"] == 0
        assert accounting["succeeded"] == len(rows) == dispatch["succeeded"]
        assert accounting["failed"] == len(failures) == dispatch["failed"]
        assert accounting["drained"] == dispatch["drained"]
        assert dispatch["dispatched"] == len(rows) + len(failures)
        assert dispatch["dispatched"] + dispatch["drained"] == dispatch["planned"] == 180
        assert accounting["failed_terminal"] == sum(bool(f.get("_ng_failure_terminal")) for f in failures)


class TestDispatcherRows:
    @pytest.mark.parametrize(
        ("status", "failure_class"),
        [
            (429, "agent_request_failed"),
            (503, "agent_request_failed"),
            (500, "agent_run_error"),
            (400, "agent_run_error"),
        ],
    )
    def test_http_errors_become_gym_failure_rows(self, status: int, failure_class: str) -> None:
        request = httpx.Request("POST", "http://127.0.0.1:1/run")
        response = httpx.Response(status, text="x" * 2500, request=request)
        exc = httpx.HTTPStatusError("boom", request=request, response=response)
        row = gym_failure_row({"_ng_task_index": 2, "_ng_rollout_index": 0, "agent_ref": {"name": "a"}}, exc)
        assert row["_ng_failure_class"] == failure_class
        assert row["_ng_failure_http_status"] == status
        assert row["_ng_failure_type"] == "HTTPStatusError"
        assert row["_ng_failure_response_body"] == "x" * 2000 + "…"
        assert (row["_ng_task_index"], row["_ng_rollout_index"], row["agent_ref"]) == (2, 0, {"name": "a"})

    def test_connection_errors_have_no_status(self) -> None:
        row = gym_failure_row(
            {"_ng_task_index": 0, "_ng_rollout_index": 0, "agent_ref": None}, httpx.ConnectError("refused")
        )
        assert row["_ng_failure_class"] == "agent_request_failed"
        assert row["_ng_failure_http_status"] is None and row["_ng_failure_response_body"] is None
        assert row["_ng_failure_type"] == "ConnectError"


class TestAgentReplies:
    CONFIG = SyntheticConfig(num_tasks=60, repeats_per_task=2, model_calls_per_rollout=1, failure_rate=0.3)

    def test_replies_follow_who_reports_the_failure(self) -> None:
        seen: Counter[int] = Counter()
        for task in range(60):
            event = rollout_event(self.CONFIG, 3, task, 0)
            seconds, status, body = reply_for(event.latency_seconds or 0.0, event.row or {}, 10 * 3600.0)
            seen[status] += 1
            assert seconds == event.latency_seconds
            row = event.row or {}
            if row.get("_ng_failure_class") in REQUEST_FAILURES:
                assert status >= 400
            else:
                assert status == 200 and orjson.loads(body) == row
        assert seen[200] and sum(count for status, count in seen.items() if status != 200)

    def test_tasks_past_the_timeout_reply_timeout_exceeded_at_the_timeout(self) -> None:
        event = rollout_event(self.CONFIG, 3, 0, 0)
        seconds, status, body = reply_for(event.latency_seconds or 0.0, event.row or {}, timeout_s=1.0)
        row = orjson.loads(body)
        assert (seconds, status) == (1.0, 200)
        assert row["_ng_failure_class"] == "timeout_exceeded" and row["_ng_failure_terminal"] is False


class TestConfig:
    def test_default_plan_overbooks_the_budget(self) -> None:
        config = DemoConfig(duration_s=30, concurrency=8)
        assert config.budget_s == 18_000
        capacity = config.concurrency * config.budget_s / MEAN_TASK_SECONDS
        assert capacity < 4 * config.num_tasks < 1.2 * capacity
        assert DemoConfig(tasks=7).num_tasks == 7

    def test_mean_task_seconds_matches_the_duration_model(self) -> None:
        rng = random.Random(5)
        draws = [min(sample_task_seconds(rng), 3600.0) for _ in range(40_000)]
        assert sum(draws) / len(draws) == pytest.approx(MEAN_TASK_SECONDS, rel=0.05)

    def test_cli_rejects_a_bad_option(self, capsys: pytest.CaptureFixture[str]) -> None:
        with pytest.raises(SystemExit) as exit_info:
            main(["demo", "--duration", "0"])
        assert exit_info.value.code == 2
        assert capsys.readouterr().err == (
            "rollout-sidecar demo: error: argument --duration: must be > 0 and <= 86400 s, got '0' "
            "(usage: rollout-sidecar demo --help)\n"
        )


EXPOSITION = """\
# TYPE rollout_sidecar_rollouts_completed_total counter
rollout_sidecar_rollouts_completed_total{run_id="a"} 12.0
rollout_sidecar_rollouts_completed_total{run_id="b"} 99.0
# TYPE rollout_sidecar_rollouts_failed_total counter
rollout_sidecar_rollouts_failed_total{failure_class="timeout_exceeded",run_id="a",terminal="false"} 2.0
rollout_sidecar_rollouts_failed_total{failure_class="timeout_exceeded",run_id="a",terminal="true"} 1.0
# TYPE rollout_sidecar_task_duration_quantile_seconds summary
rollout_sidecar_task_duration_quantile_seconds{quantile="0.5",run_id="a"} 98.5
rollout_sidecar_task_duration_quantile_seconds{quantile="0.95",run_id="a"} 400.0
rollout_sidecar_task_duration_quantile_seconds_count{run_id="a"} 12.0
rollout_sidecar_task_duration_quantile_seconds_sum{run_id="a"} 1500.0
# TYPE rollout_sidecar_drain_margin_seconds gauge
rollout_sidecar_drain_margin_seconds{run_id="a"} 170.0
# TYPE rollout_sidecar_health_rollouts gauge
rollout_sidecar_health_rollouts{run_id="a",verdict="healthy"} 10.0
rollout_sidecar_health_rollouts{run_id="a",verdict="unhealthy"} 2.0
# TYPE rollout_sidecar_health_findings gauge
rollout_sidecar_health_findings{check="model_call_failed",run_id="a"} 2.0
rollout_sidecar_health_findings{check="agent_turn_hollow",run_id="a"} 0.0
"""


class TestLiveView:
    def test_scrape_picks_one_runs_series(self) -> None:
        metrics = _scrape(EXPOSITION, "a")
        assert metrics["rollouts_completed_total"] == 12
        assert metrics["task_duration_quantile_seconds{0.5}"] == 98.5
        assert metrics["drain_margin_seconds"] == 170.0
        assert metrics["health_rollouts{healthy}"] == 10 and metrics["health_rollouts{unhealthy}"] == 2
        assert _scrape(EXPOSITION, "zzz") == {}

    def test_lines_show_the_margin_against_time_left(self) -> None:
        stats = DispatchStats(planned=100, budget_s=3600.0, dispatched=40, margin=170.0)
        metrics = _scrape(EXPOSITION, "a")
        early = live_line(stats, 600.0, metrics)
        assert "drain margin 2.8 min vs 0h50m00s left: dispatching |" in early
        assert (
            "p50 1.6 min p75 - p95 6.7 min" in early
            and "health 10 healthy, 2 unhealthy, 0 unobserved" in early
        )
        assert "0h01m40s left: time left < drain margin" in live_line(stats, 3500.0, metrics)
        assert "budget spent" in live_line(stats, 3700.0, metrics)


class TestInProcess:
    def test_the_whole_demo_then_servers_and_threads_are_gone(self, tmp_path: Path) -> None:
        before = set(threading.enumerate())
        said: list[str] = []
        (tmp_path / "journal.sqlite3.snapshots").mkdir()  # a previous demo's files are replaced
        (tmp_path / "rollouts.jsonl").write_text('{"old": 1}\n')
        config = DemoConfig(duration_s=2, tasks=12, concurrency=4, task_timeout_s=600.0, out_dir=tmp_path)
        stats, report = run_demo(config, said.append)
        assert set(threading.enumerate()) <= before
        (live,) = [line.removeprefix("Live page: ") for line in said if line.startswith("Live page: ")]
        with pytest.raises(httpx.ConnectError):
            httpx.get(live, timeout=2.0)
        assert any(line.startswith("[sim ") for line in said)
        assert (
            stats.succeeded == report["accounting"]["succeeded"] == len(_lines(tmp_path / "rollouts.jsonl"))
        )
        assert (tmp_path / "report" / "quality_summary.json").is_file()
