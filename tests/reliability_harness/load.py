"""Load: many concurrent clients stream generated runs to one service on loopback.

Each client owns one run and posts it in batches over its own connection, waiting for each
acknowledgement before the next batch (as a dispatcher's sender does). Afterwards the journal
must hold every event exactly once (zero lost, zero duplicated) and each run's report must
equal the batch health check over its rows. Acknowledgement latency is the round trip of one
batch request as the client sees it.
"""

from __future__ import annotations

import asyncio
import math
import statistics
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from .sidecar_process import Launch, SidecarProcess
from .workload import GeneratedRun, batch_files, generate_run, journal_keys, report_files

__all__ = ["LoadResult", "percentile", "run_load"]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of ``values``."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class LoadResult:
    clients: int = 0
    events: int = 0
    requests: int = 0
    seconds: float = 0.0
    lost: int = 0
    duplicated: int = 0
    reports_checked: int = 0
    latencies_ms: list[float] = field(default_factory=list, repr=False)
    violations: list[str] = field(default_factory=list)

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    def latency(self, q: float) -> float:
        return percentile(self.latencies_ms, q) if self.latencies_ms else float("nan")

    def summary(self) -> str:
        return (
            f"{self.clients} clients, {self.events} events in {self.requests} requests, {self.seconds:.1f} s "
            f"({self.events_per_s:.0f} events/s); ack latency ms p50 {self.latency(50):.1f} "
            f"p95 {self.latency(95):.1f} p99 {self.latency(99):.1f} "
            f"max {max(self.latencies_ms, default=0):.1f} "
            f"(mean {statistics.fmean(self.latencies_ms) if self.latencies_ms else 0:.1f}); "
            f"lost {self.lost}, duplicated {self.duplicated}"
        )


async def _client(url: str, run: GeneratedRun, batch: int, result: LoadResult) -> None:
    bodies = [orjson.dumps(run.events[i : i + batch]) for i in range(0, len(run.events), batch)]
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for body in bodies:
            began = time.perf_counter()
            response = await client.post(f"/v1/runs/{run.run_id}/events", content=body, headers=headers)
            result.latencies_ms.append((time.perf_counter() - began) * 1000)
            result.requests += 1
            if response.status_code != 200:
                result.violations.append(f"{run.run_id}: HTTP {response.status_code} {response.text[:200]}")
                return


def run_load(
    total_events: int,
    workdir: Path,
    *,
    clients: int = 64,
    batch: int = 16,
    check_reports: int | None = None,
    launch: Launch = "exec",
) -> LoadResult:
    """Stream at least ``total_events`` events from ``clients`` concurrent clients, then verify."""
    per_client = math.ceil(total_events / clients)
    runs = []
    for index in range(clients):
        # ~2.2 events per task at 2 repeats (results, retried failures, drains); 2.0 leaves margin
        run = generate_run(
            f"load-{index}",
            workdir / f"load-{index}",
            num_tasks=max(1, math.ceil(per_client / 2.0)),
            seed=500 + index,
            payload_bytes_per_call=128,
        )
        runs.append(run)
    result = LoadResult(clients=clients, events=sum(len(run.events) for run in runs))
    if result.events < total_events:
        result.violations.append(f"generated only {result.events} of {total_events} events")
    journal = workdir / "journal.sqlite3"
    with SidecarProcess(journal, workdir / "sidecar.log", launch=launch) as url:

        async def main() -> None:
            await asyncio.gather(*(_client(url, run, batch, result) for run in runs))

        began = time.perf_counter()
        asyncio.run(main())
        result.seconds = time.perf_counter() - began
        stored = Counter(journal_keys(journal))
        expected = Counter(key for run in runs for key in run.idempotency_keys())
        result.lost = sum((expected - stored).values())
        result.duplicated = sum(count - 1 for count in stored.values() if count > 1) + sum(
            (stored - expected).values()
        )
        if result.lost or result.duplicated:
            result.violations.append(f"lost {result.lost}, duplicated {result.duplicated}")
        with httpx.Client(base_url=url, timeout=120) as client:
            for run in runs[: len(runs) if check_reports is None else check_reports]:
                run.write_files()
                if report_files(client, run.run_id) != batch_files(run.run_dir):
                    result.violations.append(f"{run.run_id}: report differs from the batch check")
                result.reports_checked += 1
    return result
