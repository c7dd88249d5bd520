"""The run's end forecast (docs/http-api.md "Forecast"): a Kaplan-Meier duration estimate
(in-flight ages censored), a fixed-seed bootstrap Monte Carlo of the rest of the run under the
budget and drain margin, bounded in cost by :data:`MAX_POINTS` and :data:`MAX_ITEMS`."""

from __future__ import annotations

import heapq
import math
import random
import time
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sidecar.state.run import RunState

__all__ = [
    "MIN_SAMPLES",
    "ForecastInput",
    "ForecastMemo",
    "compute_forecast",
    "current",
    "forecast_input",
    "stale",
    "unforecast",
]

#: Completions needed before anything is forecast (the tracker's own threshold for its margin).
MIN_SAMPLES = 5
#: Tracker quantiles and in-flight ages the estimate reads at most.
MAX_POINTS = 400
#: Rollouts one replicate plays at most (a larger run is played at scale).
MAX_ITEMS = 1000
REPLICATES = 100
SEED = 0
METHOD = "kaplan-meier + monte-carlo"
#: A forecast is recomputed at most this often (seconds); readers in between get the last one.
REFRESH_S = 3.0
#: Forecasts the page's chart keeps per run.
HISTORY = 240
#: The exponential tail is fitted past this share of the estimate.
TAIL_FROM = 0.9


@dataclass(slots=True)
class ForecastMemo:
    """The last forecast of a run (memory only), the page's short history of its band, and the
    highest concurrency seen while work waited."""

    body: dict[str, Any] | None = None
    #: ``time.monotonic()`` of ``body``.
    at: float = -math.inf
    peak: int = 0
    #: ``(as_of, finished, p10, p50, p90)`` of the finished-by-the-budget band, oldest first.
    history: deque[tuple[float, int, int, int, int]] = field(default_factory=lambda: deque(maxlen=HISTORY))

    def keep(self, body: dict[str, Any]) -> None:
        self.body, self.at = body, time.monotonic()
        end = body["by_budget_end"]
        if end is not None:
            band = end["finished"]
            self.history.append((body["as_of"], body["finished"], band["p10"], band["p50"], band["p90"]))


@dataclass(frozen=True, slots=True)
class ForecastInput:
    """Everything a forecast reads, cut from the run in bounded time."""

    run_id: str
    as_of: float
    started_at: float
    deadline: float | None
    margin: float
    planned: int | None
    finished: int
    drained: int
    in_flight: int
    concurrency: int
    samples: int
    #: Share of ended attempts that failed, share of those that were terminal, and the failed
    #: attempts' durations (quantiles of their histogram).
    fail_share: float
    terminal_share: float
    failures: tuple[float, ...]
    durations: tuple[float, ...]
    ages: tuple[float, ...]


def forecast_input(run: RunState, now: float) -> ForecastInput:
    """The run's forecast input at ``now`` (on the loop, under the ingest pause: O(log n) reads)."""
    tracker, inflight = run.tracker, run.inflight
    snapshot = run.accounting.snapshot(ended=run.ended)
    finished = snapshot.succeeded + snapshot.failed_terminal
    count = len(inflight)
    planned = snapshot.expected
    waiting = planned is not None and planned - finished - snapshot.drained - count > 0
    memo = run.forecast
    if waiting or not memo.peak:
        memo.peak = max(memo.peak, count)
    points = min(tracker.count, MAX_POINTS)
    durations = tuple(tracker.quantile((i + 0.5) / points) or 0.0 for i in range(points))
    ages = tuple(now - start for start in inflight.start_times(MAX_POINTS))
    failed = sum(run.failed.values())
    terminal = sum(n for (_, is_terminal), n in run.failed.items() if is_terminal)
    attempts = run.completed + failed
    histogram = run.durations["failed"]
    failure_points = min(histogram.observations, 100)
    return ForecastInput(
        run_id=run.run_id,
        as_of=now,
        started_at=run.started_at,
        deadline=run.budget_deadline,
        margin=tracker.drain_margin(run.config.drain_margin_s) or 0.0,
        planned=planned,
        finished=finished,
        drained=snapshot.drained,
        in_flight=count,
        concurrency=max(memo.peak, count),
        samples=tracker.count,
        fail_share=min(failed / attempts, 0.9) if attempts else 0.0,
        terminal_share=terminal / failed if failed else 1.0,
        failures=tuple(histogram.quantile((i + 0.5) / failure_points) or 0.0 for i in range(failure_points)),
        durations=durations,
        ages=ages,
    )


class _Distribution:
    """Kaplan-Meier over ``(time, censored, weight)`` points, sampled by inversion; with
    ``rng`` the weights are Gamma-resampled (a Bayesian bootstrap per replicate)."""

    def __init__(self, points: list[tuple[float, int, float]], rng: random.Random | None = None):
        if rng is not None:
            points = [(moment, censoring, rng.gammavariate(w, 1.0)) for moment, censoring, w in points]
        at_risk, survival = sum(point[2] for point in points), 1.0
        self.times: list[float] = []
        self.cdf: list[float] = []
        for moment, censoring, weight in points:
            if not censoring and at_risk > 0:
                survival *= max(0.0, 1.0 - weight / at_risk)
                self.times.append(moment)
                self.cdf.append(1.0 - survival)
            at_risk -= weight
        self.covered = self.cdf[-1] if self.cdf else 0.0
        # The tail past the last event: exponential, its mean the excess time per event over the
        # estimate's top tenth (the exponential's maximum likelihood, censored points included).
        index = bisect_left(self.cdf, min(TAIL_FROM, self.covered))
        threshold = self.times[index] if self.times else 0.0
        events = sum(w for t, censoring, w in points if t > threshold and not censoring)
        exposure = sum((t - threshold) * w for t, _, w in points if t > threshold)
        self.excess = exposure / events if events > 0 else max(points[-1][0], 1e-9)

    def cdf_at(self, age: float) -> float:
        index = bisect_right(self.times, age)
        return self.cdf[index - 1] if index else 0.0

    def draw(self, rng: random.Random, older_than: float = 0.0) -> float:
        """A duration longer than ``older_than``: by inversion within the estimate, past its last
        event from the exponential tail."""
        low = self.cdf_at(older_than) if older_than > 0 else 0.0
        u = low + rng.random() * (1.0 - low)
        if u < self.covered:
            value = self.times[min(bisect_left(self.cdf, u), len(self.times) - 1)]
            if value > older_than:
                return value
        floor = max(older_than, self.times[-1] if self.times else 0.0)
        return floor + rng.expovariate(1.0 / self.excess)


def _spread(values: Sequence[float], labels: tuple[str, ...] = ("p10", "p50", "p90")) -> dict[str, float]:
    ordered = sorted(values)
    last = len(ordered) - 1
    return {label: ordered[round(last * int(label[1:]) / 100)] for label in labels}


def _counts(values: Sequence[float], scale: float, base: int) -> dict[str, int]:
    return {label: base + round(value * scale) for label, value in _spread(values).items()}


def unforecast(inp: ForecastInput, reason: str) -> dict[str, Any]:
    """The body without a forecast: the counts, every forecast field ``null`` and ``reason``."""
    return _body(inp, None, None, None, None, {"reason": reason})


def _body(
    inp: ForecastInput,
    by_end: dict[str, Any] | None,
    cut_off: dict[str, int] | None,
    eta: dict[str, float] | None,
    budget_for_all: float | None,
    basis: dict[str, Any],
) -> dict[str, Any]:
    planned = inp.planned
    not_started = None if planned is None else max(0, planned - inp.finished - inp.drained - inp.in_flight)
    return {
        "run_id": inp.run_id,
        "as_of": inp.as_of,
        "planned": planned,
        "finished": inp.finished,
        "in_flight": inp.in_flight,
        "not_started": not_started,
        "concurrency": inp.concurrency,
        "by_budget_end": by_end,
        "cut_off": cut_off,
        "eta_all_s": eta,
        "budget_for_all_s": budget_for_all,
        "basis": {
            "method": METHOD,
            "samples": inp.samples,
            "censored": inp.in_flight,
            "replicates": REPLICATES,
            "seed": SEED,
            **basis,
        },
    }


def compute_forecast(inp: ForecastInput) -> dict[str, Any]:
    """The ``GET /v1/runs/{run_id}/forecast`` body (on a worker thread: up to ~0.1 s of CPU)."""
    if inp.planned is None:
        return unforecast(inp, "no plan: run_started gave neither plan nor materialized_inputs")
    if inp.samples < MIN_SAMPLES:
        return unforecast(inp, f"{inp.samples} of the {MIN_SAMPLES} completions needed")
    not_started = max(0, inp.planned - inp.finished - inp.drained - inp.in_flight)
    if inp.concurrency < 1 and not_started:
        return unforecast(inp, "no started events: the run's concurrency is unknown")
    rng = random.Random(SEED)
    event_w, censor_w = inp.samples / len(inp.durations), inp.in_flight / max(1, len(inp.ages))
    points = sorted([(d, 0, event_w) for d in inp.durations] + [(a, 1, censor_w) for a in inp.ages])
    scale = max(1.0, (inp.in_flight + not_started) / MAX_ITEMS)
    slots = max(1, round(inp.concurrency / scale))
    todo = round(not_started / scale)
    ages = [inp.ages[round(i * (len(inp.ages) - 1) / max(1, round(inp.in_flight / scale) - 1))]
            for i in range(round(inp.in_flight / scale))] if inp.ages else []  # fmt: skip
    left = math.inf if inp.deadline is None else inp.deadline - inp.as_of
    fail_share = inp.fail_share if inp.failures else 0.0

    def attempts(dist: _Distribution) -> float:
        """Time until a rollout's attempts end it: a failed attempt takes a failure's time and,
        unless terminal, another attempt follows; a successful one a completion's."""
        total = 0.0
        while fail_share and rng.random() < fail_share:
            total += rng.choice(inp.failures)
            if rng.random() < inp.terminal_share:
                return total
        return total + dist.draw(rng)

    finished, cut, never, eta, last_starts = [], [], [], [], []
    for _ in range(REPLICATES):
        dist = _Distribution(points, rng)
        ends = [dist.draw(rng, age) - age for age in ages]  # the running attempt, as a completion
        done = sum(1 for end in ends if end <= left)
        running = len(ends) - done
        heap = ends + [0.0] * max(0, slots - len(ends))  # every in-flight rollout holds a slot
        heapq.heapify(heap)
        last_end = max(ends, default=0.0)
        started = 0
        start = 0.0
        for _ in range(todo):
            start = heapq.heappop(heap)
            end = start + attempts(dist)
            heapq.heappush(heap, end)
            last_end = max(last_end, end)
            if left - start > 0 and left - start >= inp.margin:
                started += 1
                if end <= left:
                    done += 1
                else:
                    running += 1
        finished.append(done)
        cut.append(running)
        never.append(todo - started)
        eta.append(last_end)
        last_starts.append(start)
    elapsed = inp.as_of - inp.started_at
    by_end = cut_off = None
    basis: dict[str, Any] = {"scale": scale, "fail_share": fail_share, "reason": None}
    if inp.deadline is not None:
        by_end = {
            "finished": _counts(finished, scale, inp.finished),
            "drained": _counts(never, scale, inp.drained),
        }
        cut_off = _counts(cut, scale, 0)
    else:
        basis["reason"] = "no dispatch_budget_s: nothing ends the run early"
    times = _spread(eta, ("p50", "p90"))
    # every planned rollout started: the budget spent so far was enough
    budget_for_all = elapsed + (_spread(last_starts, ("p90",))["p90"] + inp.margin if todo else 0.0)
    return _body(inp, by_end, cut_off, times, budget_for_all, basis)


def current(run: RunState, now: float) -> dict[str, Any] | None:
    """The run's forecast, recomputed if older than :data:`REFRESH_S`; for readers off the
    loop with ingest paused."""
    memo = run.forecast
    if stale(run):
        memo.keep(compute_forecast(forecast_input(run, now)))
    return memo.body


def stale(run: RunState) -> bool:
    """A live run's forecast is missing or :data:`REFRESH_S` old (an ended run keeps its last)."""
    return not run.ended and time.monotonic() - run.forecast.at >= REFRESH_S
