"""DispatchLatencyTracker hot path vs a naive insort-into-list tracker, measured in the same run.

A dispatcher asks for the drain margin before every dispatch and records every completion, so
one simulated completion here is ``record(seconds)`` followed by ``drain_margin(None)``. A run
starts from an empty tracker and performs ``n`` completions (lognormal durations, fixed seed).
The baseline is the reference's shape: ``bisect.insort`` into a flat list, quantile by index.
Runs alternate baseline / ours; each cell is the median of ``--runs`` runs (GC paused while
timing). Times are the process's CPU time, so other load on a shared machine is not counted.
Targets: >= 20x faster at n = 10^6 and not slower at n = 10^3.

A second figure charges each run the end-of-run ``summary()`` as well (both sides call it once),
spread over its completions.

    .venv/bin/python benchmarks/tracker.py            # ~4 min (the baseline at 10^6 is slow)
    .venv/bin/python benchmarks/tracker.py --quick    # one run per cell at 10^6, ~1.5 min
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time
from bisect import insort
from collections.abc import Callable

from sidecar.perf import DispatchLatencyTracker

TARGET_SPEEDUP_AT_1M = 20.0


class NaiveTracker:
    """The obvious implementation: a flat list kept sorted with ``insort``."""

    def __init__(self) -> None:
        self._durations: list[float] = []

    def record(self, seconds: float) -> None:
        if seconds > 0:
            insort(self._durations, seconds)

    def quantile(self, q: float) -> float | None:
        x = self._durations
        if not x:
            return None
        p = (len(x) - 1) * q
        i = int(p)
        j = min(i + 1, len(x) - 1)
        f = p - i
        return x[i] * (1 - f) + x[j] * f

    def drain_margin(self, configured: float | None) -> float | None:
        if configured is not None:
            return configured
        if len(self._durations) < 5:
            return None
        return self.quantile(0.75)

    def summary(self) -> str:
        x = self._durations
        if not x:
            return "No completed rollouts to report latency for."
        return (
            f"{len(x)} {self.quantile(0.5)} {self.quantile(0.9)} {self.quantile(0.99)} {x[-1]}\n"
            f"{sum(x) / 3600:.1f}"
        )


Factory = Callable[[], NaiveTracker | DispatchLatencyTracker]


def _one_run(factory: Factory, durations: list[float], repeats: int) -> tuple[float, float]:
    """Seconds per completion over ``repeats`` fresh trackers fed all of ``durations``.

    Returns (hot path only, hot path plus one ``summary()`` per tracker).
    """
    gc.collect()
    gc.disable()
    hot = end = 0.0
    try:
        for _ in range(repeats):
            tracker = factory()
            record, drain_margin = tracker.record, tracker.drain_margin
            start = time.process_time()
            for seconds in durations:
                record(seconds)
                drain_margin(None)
            middle = time.process_time()
            tracker.summary()
            hot += middle - start
            end += time.process_time() - middle
    finally:
        gc.enable()
    completions = repeats * len(durations)
    return hot / completions, (hot + end) / completions


def measure(n: int, runs: int, seed: int) -> dict[str, float]:
    """Median seconds per completion at ``n`` completions per run, baseline and ours."""
    rng = random.Random(seed)
    durations = [rng.lognormvariate(6.0, 1.0) for _ in range(n)]
    repeats = max(1, 100_000 // n)  # small n: repeat inside a run so one run takes milliseconds
    cells: dict[str, list[float]] = {"naive": [], "naive+summary": [], "ours": [], "ours+summary": []}
    for _ in range(runs):
        for name, factory in (("naive", NaiveTracker), ("ours", DispatchLatencyTracker)):
            hot, total = _one_run(factory, durations, repeats)
            cells[name].append(hot)
            cells[f"{name}+summary"].append(total)
    return {name: statistics.median(values) for name, values in cells.items()}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="runs per cell at n <= 10^5 (default 5)")
    parser.add_argument("--runs-1m", type=int, default=3, help="runs per cell at n = 10^6 (default 3)")
    parser.add_argument("--quick", action="store_true", help="one run per cell at n = 10^6")
    parser.add_argument("--seed", type=int, default=20261202)
    args = parser.parse_args()
    runs_1m = 1 if args.quick else args.runs_1m

    print("record(seconds) + drain_margin(None) per completion; median us per completion")
    print(
        f"{'n':>9}  {'runs':>4}  {'naive insort':>12}  {'tracker':>9}  {'speedup':>8}"
        f"  | with summary(): {'naive':>8}  {'tracker':>8}  {'speedup':>8}"
    )
    speedups: dict[int, float] = {}
    with_summary: dict[int, float] = {}
    for n in (10**3, 10**5, 10**6):
        runs = runs_1m if n == 10**6 else args.runs
        cell = measure(n, runs, args.seed)
        speedups[n] = cell["naive"] / cell["ours"]
        with_summary[n] = cell["naive+summary"] / cell["ours+summary"]
        print(
            f"{n:>9}  {runs:>4}  {cell['naive'] * 1e6:>12.3f}  {cell['ours'] * 1e6:>9.3f}"
            f"  {speedups[n]:>7.1f}x"
            f"  | {'':>15} {cell['naive+summary'] * 1e6:>8.3f}  {cell['ours+summary'] * 1e6:>8.3f}"
            f"  {with_summary[n]:>7.1f}x"
        )
    ok_large = min(speedups[10**6], with_summary[10**6]) >= TARGET_SPEEDUP_AT_1M
    ok_small = min(speedups[10**3], with_summary[10**3]) >= 1.0
    print(
        f"target >= {TARGET_SPEEDUP_AT_1M:.0f}x at 10^6: {'met' if ok_large else 'MISSED'}; "
        f"not slower at 10^3: {'met' if ok_small else 'MISSED'}"
    )
    return 0 if ok_large and ok_small else 1


if __name__ == "__main__":
    raise SystemExit(main())
