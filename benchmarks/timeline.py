"""Timeline benchmark: its cost is fixed per run, whatever the number of rollouts.

One command::

    .venv/bin/python benchmarks/timeline.py                     # 1k vs 1M everywhere
    .venv/bin/python benchmarks/timeline.py --big 200000 --phases pure,state

Three phases, each comparing a run of ``--small`` (1,000) rollouts with one of ``--big``
(1,000,000), both lasting ``--hours`` (3) of event time, and printing the ratio big/small:

* **pure**: :class:`sidecar.state.timeline.Timeline` alone, fed one fact per rollout: its points,
  its pickled bytes (what a snapshot holds) and its buffers, and the time of one ``advance``
  (the per-fact cost on the ingest path, median of ``--repeats``); plus a week-long 1M run.
* **state**: a :class:`sidecar.state.run.RunState` fed a ``started`` and a ``completed`` fact per
  rollout (journal facts, as the ingest path applies them): the timeline's share of the run's
  snapshot (the pickled state with its timeline minus without it) and of the journal (the
  facts' encoding: the timeline journals nothing, so its share is 0 by construction, and the
  journal bytes per rollout are printed to show they do not move).
* **served**: a journal of digested completions (``benchmarks/fact_journal.py``'s generated rows)
  written directly, ``rollout-sidecar serve`` started on it, then ``GET /v1/runs/big/timeline``
  ``--requests`` times over loopback: body bytes and the median / p95 latency at the client,
  with the handler's own ``Server-Timing``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import pickle
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.fact_journal import (  # noqa: E402
    REPEATS_PER_TASK,
    T0,
    completed_templates,
    template_rows,
    write_journal,
)
from benchmarks.state import serve  # noqa: E402
from sidecar.ingest.engines import default_engines  # noqa: E402
from sidecar.ingest.events import RunStarted  # noqa: E402
from sidecar.journal import (  # noqa: E402
    CompletedFact,
    Disposition,
    StartedFact,
    encode_fact,
)
from sidecar.state.run import RunState  # noqa: E402
from sidecar.state.timeline import MAX_POINTS, Timeline, TimelineSample  # noqa: E402


class _Counts:
    """The smallest source a timeline samples: counters, no gauges worth the name."""

    def __init__(self) -> None:
        self.completed = 0

    def timeline_samples(self, times: Sequence[float]) -> list[TimelineSample]:
        return [
            TimelineSample(self.completed, self.completed, 0, 0, 0, 0, 2.0, at, 0, 0)
            for at in times
        ]


def _buffers(timeline: Timeline) -> int:
    """Bytes of the timeline's columns (its only part that grows with points)."""
    columns: list[Any] = timeline.__getstate__()["_columns"]
    return sum(column.itemsize * column.buffer_info()[1] for column in columns)


def _pure(count: int, span_s: float, repeats: int) -> tuple[int, int, int, float]:
    """(points, pickled bytes, buffer bytes, ns per advance) of a run of ``count`` facts."""
    step = span_s / count
    timings = []
    for _ in range(repeats):
        timeline, source = Timeline(T0), _Counts()
        gc.disable()
        began = time.perf_counter_ns()
        advance = timeline.advance
        for index in range(count):
            advance(T0 + index * step, source)
            source.completed += 1
        fed = time.perf_counter_ns() - began
        began = time.perf_counter_ns()
        for index in range(count):  # the same loop without the timeline: subtracted
            _skip(T0 + index * step, source)
            source.completed += 1
        timings.append((fed - (time.perf_counter_ns() - began)) / count)
        gc.enable()
    times, _ = timeline.columns(source)
    return len(times), len(pickle.dumps(timeline)), _buffers(timeline), statistics.median(timings)


def _skip(at: float, source: _Counts) -> None:
    """A call of ``advance``'s shape that does nothing (the benchmark loop's own cost)."""


def pure_phase(args: argparse.Namespace) -> None:
    span = args.hours * 3600.0
    print(f"## pure Timeline, one fact per rollout over {args.hours:g} h (median of {args.repeats})")
    rows = {}
    for label, count, seconds in (
        ("small", args.small, span),
        ("big", args.big, span),
        ("big, one week", args.big, 7 * 86_400.0),
    ):
        rows[label] = points, pickled, buffers, ns = _pure(count, seconds, args.repeats)
        print(
            f"  {label:>14} {count:>10,} facts: {points:>5} points, {pickled:>7,} B pickled, "
            f"{buffers:>7,} B of columns, {ns:6.0f} ns per fact (amortized, loop subtracted)"
        )
    small, big = rows["small"], rows["big"]
    print(
        f"  ratio big/small: points {big[0] / small[0]:.2f}, pickled {big[1] / small[1]:.2f}, "
        f"columns {big[2] / small[2]:.2f}; bound {MAX_POINTS} points x 10 x 8 B = {MAX_POINTS * 80:,} B"
    )


def _state_facts(count: int, span_s: float) -> Iterator[StartedFact | CompletedFact]:
    step = span_s / count
    for index in range(count):
        task, rollout = divmod(index, REPEATS_PER_TASK)
        at = T0 + index * step
        yield StartedFact(at, 0, task, rollout, 0, at)
        yield CompletedFact(
            at + step / 2, 0, 1.0 + (index * 7919) % 600, task, rollout, int(Disposition.NOT_PERSISTED),
            "", False, None, None, None, None, False, None, None, None, at + step / 2,
        )  # fmt: skip


def _state(count: int, span_s: float) -> tuple[int, int, int, int]:
    """(points, timeline bytes in the snapshot, snapshot bytes, journal bytes) of a run state."""
    started = RunStarted(kind="run_started", dispatch_budget_s=span_s, task_timeout_s=60.0)
    state = RunState("big", started, received_at=T0, engines=default_engines())
    journal_bytes = 0
    for fact in _state_facts(count, span_s):
        journal_bytes += len(encode_fact(fact))
        state.apply_fact(fact)
    with_timeline = len(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
    kept = state.timeline
    state.timeline = Timeline(T0)
    without = len(pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL))
    state.timeline = kept
    return len(state.timeline_body()["t"]), with_timeline - without, with_timeline, journal_bytes


def state_phase(args: argparse.Namespace) -> None:
    span = args.hours * 3600.0
    print(f"## RunState, a started and a completed fact per rollout over {args.hours:g} h")
    rows = {}
    for label, count in (("small", args.small), ("big", args.big)):
        rows[label] = points, share, snapshot, journal = _state(count, span)
        print(
            f"  {label:>6} {count:>10,} rollouts: {points:>5} points; timeline {share:>7,} B of a "
            f"{snapshot:>12,} B snapshot ({share / count:8.3f} B per rollout); journal {journal / count:.1f} "
            "B per rollout, of which the timeline 0"
        )
    small, big = rows["small"], rows["big"]
    print(
        f"  ratio big/small: timeline bytes in the snapshot {big[1] / small[1]:.2f} "
        f"(rollouts x{args.big / args.small:,.0f}); journal bytes per rollout "
        f"{(big[3] / args.big) / (small[3] / args.small):.2f}"
    )


def _timed_gets(url: str, requests: int) -> tuple[int, list[float], list[float], bytes]:
    client_ms, server_ms = [], []
    body = b""
    with httpx.Client(base_url=url, timeout=60) as client:
        for _ in range(requests):
            began = time.perf_counter()
            response = client.get("/v1/runs/big/timeline")
            client_ms.append((time.perf_counter() - began) * 1000)
            assert response.status_code == 200, response.text
            timing = response.headers.get("server-timing", "app;dur=nan")
            server_ms.append(float(timing.split("dur=")[1]))
            body = response.content
    return len(body), client_ms, server_ms, body


def served_phase(args: argparse.Namespace, tmp: Path) -> None:
    span = args.hours * 3600.0
    templates = completed_templates(template_rows()[:200])
    print(f"## GET /v1/runs/big/timeline from `rollout-sidecar serve`, {args.requests} requests each")
    rows = {}
    for label, count in (("small", args.small), ("big", args.big)):
        journal = tmp / label / "journal.sqlite3"
        journal.parent.mkdir(parents=True)
        began = time.perf_counter()
        asyncio.run(
            write_journal(journal, templates, count, step_s=span / count, dispatch_budget_s=span * 1.1)
        )
        written = time.perf_counter() - began
        with serve(journal) as (url, _pid):
            size, client_ms, server_ms, body = _timed_gets(url, args.requests)
        points = len(orjson.loads(body)["t"])
        rows[label] = size, statistics.median(client_ms)
        p95 = statistics.quantiles(client_ms, n=20)[-1]
        print(
            f"  {label:>6} {count:>10,} rollouts ({written:4.1f} s to write): {points:>5} points, "
            f"{size:>7,} B body; client median {statistics.median(client_ms):6.2f} ms, p95 {p95:6.2f} ms; "
            f"handler median {statistics.median(server_ms):6.2f} ms"
        )
    small, big = rows["small"], rows["big"]
    print(f"  ratio big/small: body bytes {big[0] / small[0]:.2f}, client median {big[1] / small[1]:.2f}")
    print("  [target: the same size at 1k and 1M rollouts, served in well under 100 ms]")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--small", type=int, default=1_000, help="rollouts of the small run")
    parser.add_argument("--big", type=int, default=1_000_000, help="rollouts of the big run")
    parser.add_argument("--hours", type=float, default=3.0, help="how long both runs last")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=50, help="timeline requests per served run")
    parser.add_argument("--phases", default="pure,state,served", help="comma-separated subset to run")
    args = parser.parse_args()
    phases = set(args.phases.split(","))
    print(f"cpus {os.cpu_count()}; load average {os.getloadavg()[0]:.1f}")
    if "pure" in phases:
        pure_phase(args)
    if "state" in phases:
        state_phase(args)
    if "served" in phases:
        with tempfile.TemporaryDirectory() as name:
            served_phase(args, Path(name))
    print(f"load average at the end {os.getloadavg()[0]:.1f} (other work on the machine slows every figure)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
