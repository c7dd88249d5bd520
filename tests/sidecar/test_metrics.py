"""Metrics: the contract's names, values that match the run, bounded series, promtool-clean."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from health.registry import CHECK_IDS
from sidecar.http.app import create_app
from sidecar.http.service import Service
from sidecar.http.settings import ServiceSettings

from .service_support import generate_run

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    service = Service(ServiceSettings(journal_path=tmp_path / "j.sqlite3", health_metrics_interval_s=0.0))
    await service.start()
    transport = httpx.ASGITransport(app=create_app(service))
    async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as c:
        yield c
    await service.stop()


async def _post(client: httpx.AsyncClient, run_id: str, events: list[dict[str, Any]]) -> None:
    for start in range(0, len(events), 200):
        response = await client.post(f"/v1/runs/{run_id}/events", json=events[start : start + 200])
        assert response.status_code == 200, response.text


def _samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def _value(samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def _run_series(text: str, run_id: str) -> int:
    return sum(1 for _, labels in _samples(text) if ("run_id", run_id) in labels)


async def _full_run(client: httpx.AsyncClient, run_id: str = "m") -> Any:
    run = generate_run(num_tasks=8, repeats=3, seed=2, failure_rate=0.3, drained_fraction=0.1)
    start = {
        "kind": "run_started",
        "plan": run.plan,
        "dispatch_budget_s": 7200.0,
        "task_timeout_s": 900.0,
        "started_at": 1.7e9,
    }
    await _post(client, run_id, [start, *run.events])
    await _post(client, run_id, [{"kind": "run_ended"}])  # later, so the frozen rates have a span
    return run


class TestNames:
    async def test_every_contract_series_is_exposed(self, client: httpx.AsyncClient) -> None:
        await _full_run(client)
        text = (await client.get("/metrics")).text
        exposed = {name for name, _ in _samples(text)}
        contract = (REPO / "deploy" / "metric_names.txt").read_text().split()
        missing = sorted(set(contract) - exposed)
        assert not missing, missing

    async def test_promtool_finds_nothing(self, client: httpx.AsyncClient, tmp_path: Path) -> None:
        promtool = shutil.which("promtool")
        if promtool is None:
            pytest.skip("promtool not installed (Debian package 'prometheus'); CI installs it")
        await _full_run(client)
        text = (await client.get("/metrics")).text
        result = await asyncio.to_thread(
            subprocess.run,
            [promtool, "check", "metrics"],
            input=text,
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        assert (result.returncode, result.stdout, result.stderr) == (0, "", "")


class TestValues:
    async def test_values_follow_the_events(self, client: httpx.AsyncClient) -> None:
        run = await _full_run(client)
        report = (await client.get("/report", params={"run_id": "m"})).json()
        s = _samples((await client.get("/metrics")).text)
        kinds = [event["kind"] for event in run.events]
        assert _value(s, "rollout_sidecar_rollouts_completed_total", run_id="m") == kinds.count("completed")
        assert _value(s, "rollout_sidecar_rollouts_drained_total", run_id="m") == kinds.count("drained")
        failed = sum(v for (name, _), v in s.items() if name == "rollout_sidecar_rollouts_failed_total")
        assert failed == kinds.count("failed") > 0
        tracker = run.local_tracker()
        assert _value(s, "rollout_sidecar_tracker_samples", run_id="m") == tracker.count
        for label, q in (("0.5", 0.5), ("0.75", 0.75), ("0.95", 0.95)):
            value = _value(s, "rollout_sidecar_task_duration_quantile_seconds", run_id="m", quantile=label)
            assert value == tracker.quantile(q)
        assert _value(s, "rollout_sidecar_drain_margin_seconds", run_id="m") == tracker.drain_margin(None)
        assert _value(s, "rollout_sidecar_budget_deadline_timestamp_seconds", run_id="m") == 1.7e9 + 7200.0
        assert _value(s, "rollout_sidecar_task_timeout_seconds", run_id="m") == 900.0
        assert _value(s, "rollout_sidecar_rollouts_expected", run_id="m") == 24
        accounting = report["accounting"]
        assert _value(s, "rollout_sidecar_rollouts_pending", run_id="m") == accounting["pending"]
        summary = report["quality_summary"]["run"]
        for verdict, count in summary["verdicts"].items():
            assert _value(s, "rollout_sidecar_health_rollouts", run_id="m", verdict=verdict) == count
        for check in CHECK_IDS:
            assert (
                _value(s, "rollout_sidecar_health_findings", run_id="m", check=check)
                == summary["issues"][check]
            )
        assert (
            _value(s, "rollout_sidecar_health_tasks_closed", run_id="m")
            == report["health"]["tasks_closed"]
            > 0
        )
        completed = _value(s, "rollout_sidecar_task_duration_seconds_count", run_id="m", outcome="completed")
        assert completed == kinds.count("completed")
        perf = report["perf_summary"]
        assert (
            _value(s, "rollout_sidecar_tokens_total", run_id="m", kind="prompt")
            == perf["total_prompt_tokens"]
        )
        assert _value(s, "rollout_sidecar_ingest_events_total", kind="completed", result="accepted") == (
            kinds.count("completed")
        )
        assert _value(s, "rollout_sidecar_runs_active") == 1
        assert _value(s, "rollout_sidecar_journal_commit_batch_events_count") >= 1


class TestBoundedSeries:
    async def test_series_per_run_do_not_grow_with_tasks(self, client: httpx.AsyncClient) -> None:
        def events(tasks: int) -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = [
                {"kind": "run_started", "plan": {str(t): 2 for t in range(tasks)}, "dispatch_budget_s": 60.0}
            ]
            for task in range(tasks):
                row = {"_ng_task_index": task, "_ng_rollout_index": 0}
                out.append({"kind": "completed", "seconds": 1.0 + task % 50, "row": row})
                failure = {
                    **row,
                    "_ng_rollout_index": 1,
                    "_ng_failure_class": f"class-{task}",
                    "_ng_failure_terminal": task % 2 == 0,
                }
                out.append({"kind": "failed", "seconds": 2.0, "row": failure})
            out.append({"kind": "run_ended"})
            return out

        for name, tasks in (("small", 3), ("large", 1500)):
            run = events(tasks)
            await _post(client, name, run[:-1])
            await _post(client, name, run[-1:])  # later, so the frozen rates have a span
        text = (await client.get("/metrics")).text
        small, large = _run_series(text, "small"), _run_series(text, "large")
        # The straggler threshold has a sample only once a rule applies (20 samples for the p95
        # rule): "large" has one, "small" (3 tasks, no task timeout) has none.
        threshold = "rollout_sidecar_straggler_threshold_seconds"
        assert f'{threshold}{{run_id="large"}}' in text
        assert f'{threshold}{{run_id="small"}}' not in text
        assert small + 1 == large, (small, large)
        # 3 counters + 2x24 histogram + 5 quantile-summary + 10 gauges + 5 in-flight gauges
        # + 3 verdicts + 14 findings + 2 flags + 4 token kinds + failures (at most 12 classes x 2).
        assert large <= 3 + 48 + 5 + 10 + 5 + 3 + 14 + 2 + 4 + 24
        total = len(_samples(text))
        assert total <= 2 * 118 + 60, total  # two runs plus the service's own ~50 series
        labels = {key for (_, label_set) in _samples(text) for key, _ in label_set}
        assert not labels & {"task", "task_index", "rollout", "rollout_index", "rollout_id"}
