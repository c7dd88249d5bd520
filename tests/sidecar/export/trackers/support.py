"""What the tracker tests share: a run to feed, the figures ``/report`` gives, waiting."""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson

from sidecar.http.report_files import fetch_report
from tests.sidecar.service_support import GeneratedRun, generate_run

__all__ = ["RUN", "assert_artifacts", "expected_final", "report_files", "run_events", "wait_for"]

RUN = "trk-run"
T = TypeVar("T")


def run_events(seed: int = 3) -> tuple[GeneratedRun, dict[str, Any]]:
    run = generate_run(num_tasks=10, repeats=3, seed=seed, fault_rate=0.04, failure_rate=0.1)
    started = {
        "kind": "run_started",
        "plan": run.plan,
        "dispatch_budget_s": 7200.0,
        "drain_margin_s": 30.0,
        "task_timeout_s": 600.0,
        "ignored_checks": ["model_call_runaway_generation"],
    }
    return run, started


def wait_for(probe: Callable[[], T | None], what: str, timeout_s: float = 90.0) -> T:
    """``probe()``'s first true value; fails naming ``what`` after ``timeout_s`` (a hang, not a speed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def report_files(base: str, run_id: str, out: Path) -> dict[str, bytes]:
    """The files ``rollout-sidecar report`` writes for ``run_id``, plus the perf summary."""
    files = fetch_report(base, run_id, out)
    written = {path.name: path.read_bytes() for path in (files.summary, files.verdicts, files.report)}
    report = orjson.loads(written["report.json"])
    written["perf_summary.json"] = orjson.dumps(report["perf_summary"], option=orjson.OPT_INDENT_2) + b"\n"
    return written


def expected_final(files: dict[str, bytes]) -> dict[str, float]:
    """Every final key and the ``/report`` figure it must equal, read here independently."""
    report = orjson.loads(files["report.json"])
    summary = orjson.loads(files["quality_summary.json"])["run"]
    latency, accounting = report["latency"], report["accounting"]
    p = "rollout_sidecar/final/"
    expected: dict[str, Any] = {
        p + "rollouts_per_hour": latency["completions_per_hour"],
        p + "latency/p50_s": latency["quantiles"]["0.5"],
        p + "latency/p75_s": latency["quantiles"]["0.75"],
        p + "latency/p90_s": latency["quantiles"]["0.9"],
        p + "latency/p95_s": latency["quantiles"]["0.95"],
        p + "latency/p99_s": latency["quantiles"]["0.99"],
        p + "latency/max_s": latency["quantiles"]["1.0"],
        p + "drain_margin_s": latency["drain_margin"],
        p + "samples": latency["samples"],
        p + "completed": report["events"]["completed"],
        p + "drained": report["events"]["drained"],
        p + "health/healthy": summary["verdicts"]["healthy"],
        p + "health/unhealthy": summary["verdicts"]["unhealthy"],
        p + "health/unobserved": summary["verdicts"]["unobserved"],
        p + "health/records": summary["artifacts"]["records"],
        p + "duration_s": report["ended_at"] - report["started_at"],
        **{p + "accounting/" + name: value for name, value in accounting.items()},
    }
    return {key: float(value) for key, value in expected.items() if value is not None}


def assert_artifacts(logged: dict[str, bytes], files: dict[str, bytes], run_id: str) -> None:
    """The tracker holds the report's files byte for byte, plus the run's page (``report.html``):
    the self-contained page of this run, whose data ends the run (its ``as_of`` is the export's)."""
    logged = dict(logged)
    page = logged.pop("report.html", None)
    assert logged == files  # byte for byte
    assert page is not None, "report.html (the run page) was not logged"
    text = html.unescape(page.decode())
    assert text.startswith("<!doctype html>") and "connect-src 'none'" in text  # makes no request
    assert f'"run_id":"{run_id}"' in text and '"status":"ended"' in text
