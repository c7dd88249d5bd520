"""Outage: the sidecar is SIGKILLed in the middle of a run and comes back ``outage_s`` later.

A simulated dispatcher (concurrent workers, simulated task durations) reports every finished
rollout through ``dispatcher_client.SidecarClient``. It must finish with no exception, each
client call must return within the documented bound (``ClientConfig.ack_timeout_s``: how long
``completed`` may wait for the sidecar's ``ng_perf``; other calls never wait), nothing may be
dropped, and once the sidecar is back (same port, same journal) the run's report must equal the
batch health check over its rows byte for byte.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from dispatcher_client import ClientConfig, SidecarClient
from sidecar.perf import build_ng_perf

from .load import percentile
from .sidecar_process import Launch, SidecarProcess, free_port
from .workload import batch_files, generate_run

__all__ = ["OutageResult", "run_outage"]


@dataclass
class OutageResult:
    outage_s: float = 0.0
    run_s: float = 0.0
    events: int = 0
    events_during_outage: int = 0
    bound_s: float = 0.0
    call_ms_up: list[float] = field(default_factory=list, repr=False)
    call_ms_down: list[float] = field(default_factory=list, repr=False)
    stats: dict[str, Any] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)

    def summary(self) -> str:
        def fmt(values: list[float]) -> str:
            if not values:
                return "n/a"
            return (
                f"p50 {percentile(values, 50):.2f} p99 {percentile(values, 99):.2f} max {max(values):.2f} ms"
            )

        return (
            f"outage {self.outage_s:.0f} s in a {self.run_s:.0f} s run, {self.events} events "
            f"({self.events_during_outage} while down); client call time up: {fmt(self.call_ms_up)}; "
            f"down: {fmt(self.call_ms_down)}, {sum(ms > 50 for ms in self.call_ms_down)} over 50 ms "
            f"(calls in flight when it died); bound {self.bound_s * 1000:.0f} ms; "
            f"dropped {self.stats.get('dropped')}, spooled {self.stats.get('spooled')}, "
            f"retried {self.stats.get('retried')}, duplicates {self.stats.get('duplicates')}"
        )


async def _dispatch(
    client: SidecarClient,
    body: list[dict[str, Any]],
    run_s: float,
    workers: int,
    down: asyncio.Event,
    result: OutageResult,
) -> None:
    queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
    for event in body:
        queue.put_nowait(event)
    mean_task_s = run_s * workers / max(1, len(body))
    rng = random.Random(11)

    async def worker() -> None:
        while not queue.empty():
            event = queue.get_nowait()
            await asyncio.sleep(rng.uniform(0.5, 1.5) * mean_task_s)  # the rollout itself
            began = time.perf_counter()
            if event["kind"] == "completed" and "row" in event:
                perf = await client.completed(event["row"], event["row"], seconds=event["seconds"])
                if orjson.dumps(perf) != orjson.dumps(build_ng_perf(event["row"], event["seconds"] * 1000.0)):
                    result.violations.append("completed() returned an ng_perf other than build_ng_perf's")
            else:
                client.submit_event(event)
            took = (time.perf_counter() - began) * 1000
            (result.call_ms_down if down.is_set() else result.call_ms_up).append(took)
            if down.is_set():
                result.events_during_outage += 1

    await asyncio.gather(*(worker() for _ in range(workers)))


def run_outage(
    outage_s: float,
    workdir: Path,
    *,
    run_s: float | None = None,
    num_tasks: int = 200,
    workers: int = 16,
    launch: Launch = "exec",
) -> OutageResult:
    """A run of ``run_s`` (default ``2 * outage_s + 6``) seconds with the sidecar down for ``outage_s``."""
    total_s = run_s if run_s is not None else 2 * outage_s + 6
    result = OutageResult(outage_s=outage_s)
    run = generate_run("outage", workdir / "run", num_tasks=num_tasks, seed=77)
    run.write_files()
    result.events = len(run.events)
    config = ClientConfig(spool_dir=workdir / "spool", backoff_max_s=1.0)
    result.bound_s = config.ack_timeout_s
    proc = SidecarProcess(
        workdir / "journal.sqlite3", workdir / "sidecar.log", port=free_port(), launch=launch
    )
    url = proc.start()

    async def main() -> None:
        down = asyncio.Event()
        async with SidecarClient(url, run_id=run.run_id, config=config) as client:
            client.submit_event(run.events[0])

            async def chaos() -> None:
                await asyncio.sleep((total_s - outage_s) / 3)
                await asyncio.to_thread(proc.kill)
                down.set()
                await asyncio.sleep(outage_s)
                await asyncio.to_thread(proc.start)
                down.clear()

            began = time.monotonic()
            try:
                await asyncio.gather(_dispatch(client, run.body, total_s, workers, down, result), chaos())
            except Exception as exc:
                result.violations.append(f"the dispatcher failed: {exc!r}")
            client.submit_event(run.events[-1])
            result.run_s = time.monotonic() - began
            if not await client.flush(120):
                result.violations.append("the client did not deliver everything within 120 s of the restart")
            stats = client.stats
            result.stats = {
                name: getattr(stats, name)
                for name in ("submitted", "sent", "duplicates", "retried", "spooled", "dropped", "rejected")
            }
            if stats.dropped or stats.rejected:
                result.violations.append(f"dropped {stats.dropped}, rejected {stats.rejected}")
            summary = (await client._get("/report/quality_summary.json", 30.0)).content
            verdicts = (await client._get("/report/verdicts", 30.0)).content
        if (summary, verdicts) != batch_files(run.run_dir):
            result.violations.append("report after the outage differs from the batch check")

    try:
        asyncio.run(main())
    finally:
        proc.stop()
    slow = [ms for ms in result.call_ms_up + result.call_ms_down if ms > result.bound_s * 1000 + 100]
    if slow:
        result.violations.append(
            f"{len(slow)} client call(s) over the {result.bound_s} s bound, max {max(slow):.0f} ms"
        )
    stalled = sum(ms > 50 for ms in result.call_ms_down)
    if stalled > workers:  # documented: a dead sidecar costs one ack_timeout_s, not one per completion
        result.violations.append(f"{stalled} calls over 50 ms while down (more than the {workers} in flight)")
    if not result.events_during_outage:
        result.violations.append("no event was dispatched while the sidecar was down")
    return result
