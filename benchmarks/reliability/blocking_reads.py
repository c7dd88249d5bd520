"""Reads that could block the event loop: ``/report`` and ``/metrics`` polled back to back.

A ``num_tasks`` x 2-rollout run is journaled and a real ``rollout-sidecar serve`` started over
it. ``/drain_margin`` is polled on one keep-alive connection (5 ms apart), first alone (the
baseline), then while one client polls ``/report`` and another ``/metrics`` back to back and a
third posts a ``latency`` event every 50 ms (so no cached result stays valid for long and the
reads are rebuilt). Figures: ``/drain_margin`` latency p50/p99/max in both phases and their
ratio, and how many reports and scrapes were served. The promise (checked by the long suite):
p99 under 5 ms while the reads run.
"""

from __future__ import annotations

import multiprocessing
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from benchmarks.reliability.load import percentile
from benchmarks.reliability.restart import write_journal
from benchmarks.reliability.sidecar_process import Launch, SidecarProcess

__all__ = ["BlockingReadsResult", "run_blocking_reads"]

RUN = "reads"


@dataclass
class BlockingReadsResult:
    events: int = 0
    baseline_ms: list[float] = field(default_factory=list)
    loaded_ms: list[float] = field(default_factory=list)
    reports: int = 0
    scrapes: int = 0
    report_ms: list[float] = field(default_factory=list)
    scrape_ms: list[float] = field(default_factory=list)
    trickled: int = 0
    violations: list[str] = field(default_factory=list)

    @staticmethod
    def figures(samples: list[float]) -> tuple[float, float, float]:
        ordered = sorted(samples)
        return percentile(ordered, 50), percentile(ordered, 99), ordered[-1]


def _poll_margin(client: httpx.Client, seconds: float, into: list[float], violations: list[str]) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        began = time.perf_counter()
        response = client.get("/drain_margin", params={"run_id": RUN})
        into.append((time.perf_counter() - began) * 1000)
        if response.status_code != 200:
            violations.append(f"/drain_margin answered {response.status_code}")
        time.sleep(0.005)


def _read_loop(url: str, path: str, stop: Any, outcomes: Any) -> None:
    """Poll ``path`` back to back (or, for ``trickle``, post a latency event every 50 ms) until
    ``stop``; put ``(path, latencies ms, errors)`` on ``outcomes``."""
    samples: list[float] = []
    errors: list[str] = []
    with httpx.Client(base_url=url, timeout=120) as client:
        while not stop.is_set():
            began = time.perf_counter()
            if path == "trickle":
                event = {
                    "kind": "latency",
                    "op": "record",
                    "seconds": 1.0,
                    "source": "bench",
                    "seq": len(samples),
                }
                response = client.post(f"/v1/runs/{RUN}/events", json=[event])
                stop.wait(0.05)
            else:
                response = client.get(path, params={"run_id": RUN} if path == "/report" else None)
            samples.append((time.perf_counter() - began) * 1000)
            if response.status_code != 200:
                errors.append(f"{path} answered {response.status_code}")
    outcomes.put((path, samples, errors[:10]))


def run_blocking_reads(
    workdir: Path,
    *,
    launch: Launch = "exec",
    num_tasks: int = 5000,
    seconds: float = 10.0,
    p99_bound_ms: float = 5.0,
) -> BlockingReadsResult:
    """See the module docstring; ``p99_bound_ms`` of ``None``-like 0 skips the latency promise."""
    result = BlockingReadsResult()
    journal = workdir / "state" / "journal.sqlite3"
    journal.parent.mkdir(parents=True)
    result.events = write_journal(journal, RUN, num_tasks)
    sidecar = SidecarProcess(journal, workdir / "sidecar.log", launch=launch)
    url = sidecar.start(timeout=900)
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    outcomes: multiprocessing.Queue[tuple[str, list[float], list[str]]] = context.Queue()
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            _poll_margin(client, seconds, result.baseline_ms, result.violations)
            # the readers run in other processes: in this one they would contend for its GIL
            # with the poller and inflate the very latency measured
            children = [
                context.Process(target=_read_loop, args=(url, path, stop, outcomes))
                for path in ("/report", "/metrics", "trickle")
            ]
            for child in children:
                child.start()
            time.sleep(0.5)
            _poll_margin(client, seconds, result.loaded_ms, result.violations)
            stop.set()
            for _ in children:
                path, samples, errors = outcomes.get(timeout=300)
                result.violations += errors
                if path == "/report":
                    result.report_ms = samples
                elif path == "/metrics":
                    result.scrape_ms = samples
                else:
                    result.trickled = len(samples)
            for child in children:
                child.join(30)
    finally:
        stop.set()
        sidecar.stop()
    result.reports, result.scrapes = len(result.report_ms), len(result.scrape_ms)
    if result.reports < 2 or result.scrapes < 2:
        result.violations.append(f"only {result.reports} reports and {result.scrapes} scrapes served")
    p99 = result.figures(result.loaded_ms)[1]
    if p99_bound_ms and p99 >= p99_bound_ms:
        result.violations.append(f"/drain_margin p99 {p99:.2f} ms while reads ran (bound {p99_bound_ms} ms)")
    return result
