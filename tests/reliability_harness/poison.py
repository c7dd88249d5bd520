"""Poison values: token counts past 64 bits and durations at and past every range.

A generated run whose rows carry token counts a buggy model server could report
(``(uint64)-1`` twice in one row, so the row's sum passes 64 bits; ``2**64`` and ``1e30``,
which JSON parsers read as floats; ``1.7e308``) is posted to a real ``rollout-sidecar serve``,
each batch twice (the retry must be answered ``duplicate``, not fail). Then events carrying
every out-of-range number (durations of ``+/-1e308``, ``1e300``, negative, past
``MAX_SECONDS``; timestamps, plan repeats and counters past their ranges) must each be refused
with a 422 naming the field, and nothing of them stored. Every answer must be < 500;
``/report`` must hold only finite numbers, before and after a restart; ``/metrics`` must show
no ``+Inf``/``NaN`` sample and no ``_sum`` that fell; the health files must equal the batch
check's byte for byte.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sidecar.ingest.events import MAX_COUNT, MAX_LATENCY_MS, MAX_REPEATS_PER_TASK, MAX_SECONDS, MAX_TIMESTAMP
from tests.reliability_harness.sidecar_process import Launch, SidecarProcess
from tests.reliability_harness.workload import batch_files, generate_run, report_files

__all__ = ["OUT_OF_RANGE", "POISON_TOKENS", "PoisonResult", "poison_row", "run_poison"]

#: Token counts a model server may report: each is valid per call, their sums are not 64-bit.
POISON_TOKENS: tuple[int | float, ...] = (2**64 - 1, 2**64 - 1, 1.8446744073709552e19, 1e30, 1.7e308)

#: ``(event, field the 422 must name)``: one number past its range per event.
OUT_OF_RANGE: tuple[tuple[dict[str, Any], str], ...] = (
    ({"kind": "run_started", "dispatch_budget_s": 1e300}, "events.0.dispatch_budget_s"),
    ({"kind": "run_started", "drain_margin_s": -1.0}, "events.0.drain_margin_s"),
    ({"kind": "run_started", "task_timeout_s": MAX_SECONDS * 2}, "events.0.task_timeout_s"),
    ({"kind": "run_started", "started_at": 1e308}, "events.0.started_at"),
    ({"kind": "run_started", "plan": {"0": MAX_REPEATS_PER_TASK + 1}}, "events.0.plan.0"),
    ({"kind": "run_started", "max_attempts": 2**64}, "events.0.max_attempts"),
    ({"kind": "completed", "row": {}, "seconds": 1e308}, "events.0.seconds"),
    ({"kind": "completed", "row": {}, "seconds": -1e308}, "events.0.seconds"),
    ({"kind": "completed", "row": {}, "seconds": -0.5}, "events.0.seconds"),
    ({"kind": "completed", "row": {}, "latency_ms": MAX_LATENCY_MS * 10}, "events.0.latency_ms"),
    ({"kind": "completed", "row": {}, "attempt": MAX_COUNT + 1}, "events.0.attempt"),
    ({"kind": "failed", "row": {}, "seconds": 1e308}, "events.0.seconds"),
    ({"kind": "failed", "row": {}, "seconds": -1.0}, "events.0.seconds"),
    ({"kind": "run_ended", "ended_at": MAX_TIMESTAMP * 10}, "events.0.ended_at"),
    ({"kind": "latency", "op": "record", "seconds": 1e308, "source": "p", "seq": 1}, "events.0.seconds"),
    ({"kind": "latency", "op": "record", "seconds": 1.0, "source": "p", "seq": -1}, "events.0.seq"),
)


@dataclass
class PoisonResult:
    rows: int = 0
    poisoned_rows: int = 0
    accepted: int = 0
    duplicates: int = 0
    refused_422: int = 0
    reports_checked: int = 0
    metric_scrapes: int = 0
    largest_token_total: int = 0
    violations: list[str] = field(default_factory=list)


def poison_row(row: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """``row`` with poison token counts on its model calls (first two calls: ``(uint64)-1``)."""
    calls = row.get("ng_trajectory", {}).get("model_calls", [])
    for position, call in enumerate(calls):
        stats = call.get("token_stats")
        if not isinstance(stats, dict):
            continue
        field_name = rng.choice(("prompt_tokens", "completion_tokens", "reasoning_tokens", "cached_tokens"))
        stats[field_name] = POISON_TOKENS[min(position, 1)] if position < 2 else rng.choice(POISON_TOKENS)
    return row


def _finite_json(content: bytes, where: str, violations: list[str]) -> Any:
    def refuse(name: str) -> float:
        violations.append(f"{where}: non-finite number {name} in the body")
        return 0.0

    body = json.loads(content, parse_constant=refuse)

    def walk(value: Any) -> None:
        if isinstance(value, float) and not math.isfinite(value):
            violations.append(f"{where}: non-finite {value!r}")
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(body)
    return body


def _scrape(client: httpx.Client, sums: dict[tuple[str, str], float], result: PoisonResult) -> None:
    response = client.get("/metrics")
    if response.status_code != 200:
        result.violations.append(f"/metrics answered {response.status_code}")
        return
    result.metric_scrapes += 1
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if not math.isfinite(sample.value):
                result.violations.append(f"/metrics {sample.name}{sample.labels} = {sample.value}")
            if sample.name.endswith("_sum"):
                key = (sample.name, repr(sorted(sample.labels.items())))
                if sample.value < sums.get(key, -math.inf):
                    result.violations.append(f"/metrics {sample.name} fell: {sums[key]} -> {sample.value}")
                sums[key] = sample.value


def _check_report(client: httpx.Client, run_id: str, result: PoisonResult, where: str) -> Any:
    response = client.get("/report", params={"run_id": run_id})
    if response.status_code != 200:
        result.violations.append(f"{where}: /report answered {response.status_code}: {response.text[:200]}")
        return None
    result.reports_checked += 1
    return _finite_json(response.content, f"{where} /report", result.violations)


def run_poison(workdir: Path, *, launch: Launch = "exec", num_tasks: int = 20, seed: int = 3) -> PoisonResult:
    """Post a run with poison rows and every out-of-range number; see the module docstring."""
    result = PoisonResult()
    rng = random.Random(seed)
    poisoned: list[bool] = []

    def hook(row: dict[str, Any]) -> dict[str, Any]:
        hit = rng.random() < 0.5
        poisoned.append(hit)
        return poison_row(row, rng) if hit else row

    run_id = "poison"
    run = generate_run(run_id, workdir / "run", num_tasks=num_tasks, seed=seed, text_hook=hook)
    result.rows, result.poisoned_rows = len(poisoned), sum(poisoned)
    run.write_files()
    sidecar = SidecarProcess(workdir / "journal.sqlite3", workdir / "sidecar.log", launch=launch)
    sums: dict[tuple[str, str], float] = {}
    url = sidecar.start()
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            for start in range(0, len(run.events), 4):
                batch = run.events[start : start + 4]
                for attempt in range(2):
                    try:
                        response = client.post(f"/v1/runs/{run_id}/events", json=batch)
                    except httpx.HTTPError as exc:
                        result.violations.append(f"batch {start} try {attempt}: {exc!r}")
                        continue
                    if response.status_code != 200:
                        result.violations.append(
                            f"batch {start} try {attempt}: {response.status_code} {response.text[:200]}"
                        )
                        continue
                    body = _finite_json(response.content, f"batch {start} answer", result.violations)
                    for outcome in body["results"]:
                        result.accepted += outcome["status"] == "accepted"
                        result.duplicates += outcome["status"] == "duplicate"
                _scrape(client, sums, result)
            _check_refusals(client, run_id, result)
            _scrape(client, sums, result)
            before = _check_report(client, run_id, result, "live")
            _check_batch(client, run_id, run.run_dir, result, "live")
        sidecar.stop()
        url = sidecar.start()
        with httpx.Client(base_url=url, timeout=30) as client:
            after = _check_report(client, run_id, result, "restarted")
            _check_batch(client, run_id, run.run_dir, result, "restarted")
            sums.clear()
            _scrape(client, sums, result)
        if before is not None and after is not None:
            for body in (before, after):
                body["latency"].pop("completions_per_hour", None)
            if before != after:
                result.violations.append("/report changed across the restart")
            perf = after.get("perf_summary") or {}
            totals = [value for key, value in perf.items() if key.startswith("total_") and type(value) is int]
            result.largest_token_total = max(totals, default=0)
    finally:
        sidecar.stop()
    return result


def _check_refusals(client: httpx.Client, run_id: str, result: PoisonResult) -> None:
    runs_before = client.get("/v1/runs").json()
    for event, expected_field in OUT_OF_RANGE:
        target = "never-started" if event["kind"] == "run_started" else run_id
        response = client.post(f"/v1/runs/{target}/events", json=[event])
        if response.status_code != 422:
            result.violations.append(f"{event} answered {response.status_code}, not 422")
            continue
        body = response.json()
        if body.get("field") != expected_field:
            result.violations.append(f"{event}: 422 names {body.get('field')!r}, not {expected_field!r}")
            continue
        result.refused_422 += 1
    margin = client.get("/drain_margin", params={"run_id": run_id, "configured": "1e300"})
    if margin.status_code != 400 or margin.json().get("field") != "configured":
        result.violations.append(f"/drain_margin configured=1e300 answered {margin.status_code}")
    if client.get("/v1/runs").json() != runs_before:
        result.violations.append("a refused event changed the runs")


def _check_batch(client: httpx.Client, run_id: str, run_dir: Path, result: PoisonResult, where: str) -> None:
    try:
        live = report_files(client, run_id)
    except httpx.HTTPStatusError as exc:
        result.violations.append(f"{where}: health files answered {exc.response.status_code}")
        return
    if live != batch_files(run_dir):
        result.violations.append(f"{where}: health files != batch check")
