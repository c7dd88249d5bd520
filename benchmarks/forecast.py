"""How good is ``GET /v1/runs/{run_id}/forecast``? Seeded runs replayed through a real sidecar.

Each run is a dispatcher simulated event by event (a plan, a concurrency limit, lognormal or
heavy-tailed durations, retried failures, a budget that cuts 0-40 % of the plan), posted to a sidecar
whose clock follows the simulation; at 25/50/75 % of the budget the forecast and two naive baselines
are compared with how many rollouts really finished. Targets: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import shutil
import statistics
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from sidecar.state import forecast as forecast_module

CHECKPOINTS = (0.25, 0.5, 0.75)
RATE_WINDOW_S = 900.0
FAIL_SHARE = 0.05
MAX_ATTEMPTS = 2


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Run:
    kind: str
    planned: int
    plan: dict[str, int]
    budget: float
    margin: float
    events: list[tuple[float, dict[str, Any]]]
    finish_times: list[float]


def _duration(rng: random.Random, kind: str, median: float) -> float:
    if kind == "lognormal":
        return rng.lognormvariate(math.log(median), 0.6)
    slow = rng.random() < 0.15  # heavy-tailed mixture: a slow mode 5x longer, wider
    return rng.lognormvariate(math.log(median * (5.0 if slow else 1.0)), 0.9 if slow else 0.5)


Timed = list[tuple[float, dict[str, Any]]]


def _dispatch(rng: random.Random, plan: dict[str, int], kind: str, median: float, concurrency: int,
              budget: float, margin: float, start: float) -> tuple[Timed, list[float]]:  # fmt: skip
    """The dispatcher's events from ``start`` (FIFO queue, retried attempts at its head) and the
    finish times of the finished rollouts (before the wall at ``start + budget``)."""
    queue = [(int(task), rollout, 0) for task, repeats in plan.items() for rollout in range(repeats)]
    queue.reverse()  # popped from the end
    running: list[tuple[float, int, int, int, float]] = []  # (end, task, rollout, attempt, seconds)
    events: list[tuple[float, dict[str, Any]]] = []
    finished: list[float] = []
    now, wall = start, start + budget
    while queue or running:
        while queue and len(running) < concurrency and wall - now > 0 and wall - now >= margin:
            task, rollout, attempt = queue.pop()
            seconds = _duration(rng, kind, median)
            failed = rng.random() < FAIL_SHARE
            if failed:
                seconds *= rng.random()
            heapq.heappush(running, (now + seconds, task, rollout, attempt, -seconds if failed else seconds))
            ident = {"task_index": task, "rollout_index": rollout, "attempt": attempt}
            events.append((now, {"kind": "started", **ident, "at": now}))
        if not running:
            break
        end, task, rollout, attempt, signed = heapq.heappop(running)
        if end > wall:  # killed by the wall: never finishes
            now = end
            continue
        now = end
        ident = {"task_index": task, "rollout_index": rollout, "attempt": attempt}
        if signed < 0:
            terminal = attempt + 1 >= MAX_ATTEMPTS
            events.append((end, {"kind": "failed", **ident, "seconds": -signed, "failure_class": "timeout",
                                 "terminal": terminal, "at": end}))  # fmt: skip
            if terminal:
                finished.append(end)
            else:
                queue.append((task, rollout, attempt + 1))
        else:
            row = {"_ng_task_index": task, "_ng_rollout_index": rollout, "reward": 1.0}
            events.append((end, {"kind": "completed", **ident, "seconds": signed, "row": row, "at": end}))
            finished.append(end)
    for task, rollout, attempt in queue:  # never started (a retry not restarted counts as drained too)
        events.append((wall, {"kind": "drained", "task_index": task, "rollout_index": rollout,
                              "attempt": attempt, "at": wall}))  # fmt: skip
    return events, finished


def make_run(seed: int, start: float) -> Run:
    rng = random.Random(seed)
    kind = "lognormal" if seed % 2 == 0 else "heavy"
    plan = {str(task): rng.randint(4, 8) for task in range(rng.randint(200, 400))}
    concurrency = rng.randint(32, 128)
    median = rng.uniform(120.0, 900.0)
    margin = median * 0.5
    cut = rng.uniform(0.0, 0.4)
    # the budget that cuts ``cut`` of the plan: from the same run played without a wall
    _, unbounded = _dispatch(random.Random(seed), plan, kind, median, concurrency, math.inf, 0.0, start)
    planned = sum(plan.values())
    keep = max(1, min(len(unbounded), round(planned * (1.0 - cut))))
    budget = sorted(unbounded)[keep - 1] - start + 1.0
    events, finished = _dispatch(random.Random(seed), plan, kind, median, concurrency, budget, margin, start)
    events.sort(key=lambda item: item[0])
    return Run(kind, planned, plan, budget, margin, events, finished)


def replay(client: httpx.Client, clock: Clock, run: Run, run_id: str, start: float) -> list[dict[str, Any]]:
    """Post the run up to each checkpoint and read the forecast and the baselines there."""
    started = {"kind": "run_started", "plan": run.plan, "dispatch_budget_s": run.budget,
               "drain_margin_s": run.margin, "started_at": start, "max_attempts": MAX_ATTEMPTS}  # fmt: skip
    _post(client, run_id, [started])
    position, out = 0, []
    for fraction in CHECKPOINTS:
        moment = start + fraction * run.budget
        batch = []
        while position < len(run.events) and run.events[position][0] <= moment:
            batch.append(run.events[position][1])
            position += 1
        for offset in range(0, len(batch), 500):
            _post(client, run_id, batch[offset : offset + 500])
        clock.now = moment
        body = client.get(f"/v1/runs/{run_id}/forecast").json()
        done = sum(1 for t in run.finish_times if t <= moment)
        recent = sum(1 for t in run.finish_times if moment - RATE_WINDOW_S < t <= moment)
        elapsed, left = moment - start, run.budget - (moment - start)
        out.append({
            "checkpoint": fraction,
            "forecast": body,
            "scaled": min(run.planned, done * run.budget / elapsed),
            "rate": min(run.planned, done + recent / min(RATE_WINDOW_S, elapsed) * left),
        })  # fmt: skip
    rest = [event for _, event in run.events[position:]]
    for offset in range(0, len(rest), 500):
        _post(client, run_id, rest[offset : offset + 500])
    clock.now = start + run.budget
    _post(client, run_id, [{"kind": "run_ended", "ended_at": start + run.budget}])
    return out


def _post(client: httpx.Client, run_id: str, events: list[dict[str, Any]]) -> None:
    response = client.post(f"/v1/runs/{run_id}/events", json=events)
    response.raise_for_status()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1000)
    args = parser.parse_args(argv)
    forecast_module.REFRESH_S = 0.0  # every checkpoint reads a fresh forecast (the clock is simulated)
    clock = Clock()
    tmp = Path(tempfile.mkdtemp(prefix="forecast-bench-"))
    rows: dict[tuple[float, str], list[tuple[bool, float, float, float]]] = defaultdict(list)
    try:
        thread = ServiceThread(ServiceSettings(port=0, journal_path=tmp / "j.sqlite3"), clock=clock)
        with thread as url, httpx.Client(base_url=url, timeout=120) as client:
            for index in range(args.runs):
                start = 1.7e9 + index * 1e7
                clock.now = start
                run = make_run(args.seed + index, start)
                real = len(run.finish_times)
                for point in replay(client, clock, run, f"bench-{index}", start):
                    body = point["forecast"]
                    band = (body["by_budget_end"] or {}).get("finished")
                    if band is None:
                        print(f"run {index}: no forecast at {point['checkpoint']}: {body['basis']['reason']}")
                        continue
                    inside = band["p10"] <= real <= band["p90"]
                    errors = [abs(value - real) / run.planned for value in
                              (band["p50"], point["scaled"], point["rate"])]  # fmt: skip
                    for key in ((point["checkpoint"], run.kind), (point["checkpoint"], "all")):
                        rows[key].append((inside, *errors))  # type: ignore[arg-type]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    seeds = f"{args.seed}..{args.seed + args.runs - 1}"
    print(f"{args.runs} runs (seeds {seeds}); error = median |x - real| / plan")
    print(f"{'checkpoint':>10} {'durations':>10} {'runs':>5} {'in [p10,p90]':>13} "
          f"{'forecast p50':>13} {'scaled':>8} {'rate':>8}")  # fmt: skip
    ok = True
    for (fraction, kind), values in sorted(rows.items()):
        coverage = sum(v[0] for v in values) / len(values)
        medians = [statistics.median(v[i] for v in values) for i in (1, 2, 3)]
        print(f"{fraction:>10.0%} {kind:>10} {len(values):>5} {coverage:>13.0%} "
              f"{medians[0]:>13.2%} {medians[1]:>8.2%} {medians[2]:>8.2%}")  # fmt: skip
        if kind == "all":
            ok &= medians[0] < min(medians[1], medians[2])
            if fraction == 0.5:
                ok &= coverage >= 0.8 and medians[0] <= 0.03
    print("targets met" if ok else "targets NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
