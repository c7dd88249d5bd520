"""Ten live run pages open while the dispatcher polls ``/drain_margin``.

A ``num_tasks`` x 2-rollout run is journaled and a real ``rollout-sidecar serve`` started over
it. ``/drain_margin`` is polled on one keep-alive connection (5 ms apart), first alone (the
baseline), then while ``browsers`` pollers each do what an open run page does: load
``/runs/{id}`` and its four static files once, then fetch ``/v1/runs/{id}/page`` and
``/v1/runs/{id}/timeline`` every ``interval_s`` (the page's 2 s), and while a trickle posts a
``latency`` event every 50 ms (the run is live, so nothing cached stays valid). The pollers run
in another process (each on its own connection), so they do not contend with the measuring
one. Figures: ``/drain_margin`` latency p50/p99/max in both phases, and the polls served. The
promise (checked by the long suite): p99 under 5 ms with the ten pages open.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.reliability_harness.blocking_reads import BlockingReadsResult, poll_margin
from tests.reliability_harness.restart import write_journal
from tests.reliability_harness.sidecar_process import Launch, SidecarProcess

__all__ = ["PagePollersResult", "run_page_pollers"]

RUN = "pages"
PAGE_ONCE = (
    f"/runs/{RUN}",
    "/static/page.js",
    "/static/page.css",
    "/static/uPlot.iife.min.js",
    "/static/uPlot.min.css",
)
PAGE_POLLS = (f"/v1/runs/{RUN}/page", f"/v1/runs/{RUN}/timeline")


@dataclass
class PagePollersResult:
    events: int = 0
    browsers: int = 0
    baseline_ms: list[float] = field(default_factory=list)
    loaded_ms: list[float] = field(default_factory=list)
    polls: int = 0
    poll_ms: list[float] = field(default_factory=list)
    trickled: int = 0
    violations: list[str] = field(default_factory=list)

    figures = staticmethod(BlockingReadsResult.figures)


def _browser(
    url: str, interval_s: float, stop: threading.Event, samples: list[float], errors: list[str]
) -> None:
    with httpx.Client(base_url=url, timeout=120) as client:
        for path in PAGE_ONCE:
            if client.get(path).status_code != 200:
                errors.append(f"{path} did not answer 200")
        while not stop.is_set():
            for path in PAGE_POLLS:
                began = time.perf_counter()
                status = client.get(path).status_code
                samples.append((time.perf_counter() - began) * 1000)
                if status != 200:
                    errors.append(f"{path} answered {status}")
            stop.wait(interval_s)


def _pages(url: str, browsers: int, interval_s: float, stop: Any, outcomes: Any) -> None:
    """``browsers`` pollers plus a trickle of live events, in this (child) process, until ``stop``."""
    halt = threading.Event()
    samples: list[float] = []
    errors: list[str] = []
    threads = [
        threading.Thread(target=_browser, args=(url, interval_s, halt, samples, errors))
        for _ in range(browsers)
    ]
    for thread in threads:
        thread.start()
        time.sleep(interval_s / browsers)  # pages opened at different moments, as people do
    trickled = 0
    with httpx.Client(base_url=url, timeout=30) as client:
        while not stop.is_set():
            event = {"kind": "latency", "op": "record", "seconds": 1.0, "source": "pages", "seq": trickled}
            if client.post(f"/v1/runs/{RUN}/events", json=[event]).status_code != 200:
                errors.append("a trickled event was refused")
            trickled += 1
            stop.wait(0.05)
    halt.set()
    for thread in threads:
        thread.join(60)
    outcomes.put((samples, errors[:10], trickled))


def run_page_pollers(
    workdir: Path,
    *,
    launch: Launch = "exec",
    num_tasks: int = 5000,
    seconds: float = 10.0,
    browsers: int = 10,
    interval_s: float = 2.0,
    p99_bound_ms: float = 5.0,
) -> PagePollersResult:
    """See the module docstring; a ``p99_bound_ms`` of 0 skips the latency promise."""
    result = PagePollersResult(browsers=browsers)
    journal = workdir / "state" / "journal.sqlite3"
    journal.parent.mkdir(parents=True)
    result.events = write_journal(journal, RUN, num_tasks)
    sidecar = SidecarProcess(journal, workdir / "sidecar.log", launch=launch)
    url = sidecar.start(timeout=900)
    context = multiprocessing.get_context("fork")
    stop = context.Event()
    outcomes: multiprocessing.Queue[tuple[list[float], list[str], int]] = context.Queue()
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            poll_margin(client, seconds, result.baseline_ms, result.violations, RUN)
            child = context.Process(target=_pages, args=(url, browsers, interval_s, stop, outcomes))
            child.start()
            time.sleep(interval_s + 0.5)  # every page open and polling
            poll_margin(client, seconds, result.loaded_ms, result.violations, RUN)
            stop.set()
            result.poll_ms, errors, result.trickled = outcomes.get(timeout=300)
            result.violations += errors
            child.join(60)
    finally:
        stop.set()
        sidecar.stop()
    result.polls = len(result.poll_ms)
    expected = browsers * len(PAGE_POLLS) * int(seconds / interval_s)
    if result.polls < expected:
        result.violations.append(f"only {result.polls} page polls served (expected at least {expected})")
    p99 = result.figures(result.loaded_ms)[1]
    if p99_bound_ms and p99 >= p99_bound_ms:
        result.violations.append(
            f"/drain_margin p99 {p99:.2f} ms with {browsers} pages open (bound {p99_bound_ms} ms)"
        )
    return result
