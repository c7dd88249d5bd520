"""In-flight registry and the straggler / stall rules, on an injected clock."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest

from dispatcher_client.client import progress_event
from sidecar.ingest.engines import default_engines
from sidecar.ingest.events import EventBatch, RunStarted
from sidecar.state.inflight import InflightBudget, InflightRegistry, InflightRules, straggler_threshold
from sidecar.state.run import RunState

from .service_support import GeneratedRun, apply_event, generate_run

T0 = 1.0e9
INTERVAL = 5.0


def _event(body: dict[str, Any]) -> Any:
    return EventBatch.validate_python([body])[0]


def _row_of(event: dict[str, Any]) -> dict[str, Any] | None:
    row = event.get("row")
    return row if isinstance(row, dict) else None


class TestThreshold:
    def test_smaller_of_p95_rule_and_task_timeout(self) -> None:
        rules = InflightRules(straggler_factor=3.0, min_samples=20)
        assert straggler_threshold(rules, p95=10.0, samples=20, task_timeout_s=None) == 30.0
        assert straggler_threshold(rules, p95=10.0, samples=20, task_timeout_s=25.0) == 25.0
        assert straggler_threshold(rules, p95=10.0, samples=20, task_timeout_s=45.0) == 30.0

    def test_p95_rule_waits_for_enough_samples(self) -> None:
        rules = InflightRules(min_samples=20)
        assert straggler_threshold(rules, p95=10.0, samples=19, task_timeout_s=None) is None
        assert straggler_threshold(rules, p95=10.0, samples=19, task_timeout_s=60.0) == 60.0
        assert straggler_threshold(rules, p95=None, samples=0, task_timeout_s=None) is None

    @pytest.mark.parametrize(
        "change",
        [
            {"straggler_factor": 0.0},
            {"straggler_factor": math.inf},
            {"min_samples": 0},
            {"stall_after_s": -1.0},
            {"eval_interval_s": math.nan},
            {"max_tracked": 0},
        ],
    )
    def test_bad_rules_are_refused_with_the_value(self, change: dict[str, Any]) -> None:
        with pytest.raises(ValueError, match=next(iter(change))):
            InflightRules(**change)


class TestRegistry:
    def test_start_end_and_attempts(self) -> None:
        registry = InflightRegistry()
        assert registry.started((1, 0), 0, T0)
        assert not registry.started((1, 0), 0, T0 + 5)  # the same attempt again changes nothing
        assert registry.oldest(5)[0].started_at == T0
        registry.ended((1, 0), 0)  # its failure ends it
        assert len(registry) == 0
        registry.started((1, 0), 1, T0 + 10)  # the retry is a new in-flight attempt
        registry.ended((1, 0), 0)  # a late end of the older attempt leaves the retry in flight
        assert len(registry) == 1
        registry.ended((1, 0), None)  # a completion ends the rollout whatever its attempt
        assert len(registry) == 0

    def test_view_counts_ages_exactly(self) -> None:
        registry = InflightRegistry()
        for index in range(10):
            registry.started((index, 0), 0, T0 + index)
        view = registry.view(T0 + 20, threshold=15.0)
        assert view.count == 10
        assert view.oldest_age_s == 20.0
        assert view.age_quantiles == {"0.5": 15.0, "0.95": 20.0, "1.0": 20.0}
        assert view.stragglers == 5  # ages 16..20 exceed 15; age 15 does not
        assert [e.task for e in registry.oldest(3)] == [0, 1, 2]

    def test_cap_counts_what_it_does_not_track(self) -> None:
        registry = InflightRegistry(InflightRules(max_tracked=2))
        assert [registry.started((i, 0), 0, T0) for i in range(4)] == [True, True, False, False]
        assert len(registry) == 2
        assert registry.untracked == 2

    def test_snapshot_round_trips_through_json_without_the_process_stamps(self) -> None:
        registry, fresh = InflightRegistry(), InflightRegistry()
        for each in (registry, fresh):
            each.started((3, 1), 2, T0)
            each.started(("task-x", 0), 0, T0 + 1)
        registry.evaluate(T0 + 100, threshold=50.0)  # this process's stamps: not in a snapshot
        data = orjson.loads(orjson.dumps(registry.to_snapshot()))
        again = InflightRegistry.from_snapshot(data)
        assert again.to_snapshot() == registry.to_snapshot()
        assert again.as_dict(T0 + 200, 50.0, 10) == fresh.as_dict(T0 + 200, 50.0, 10)


def _replay_with_stuck_rollouts(run: GeneratedRun, stuck: int) -> tuple[RunState, list[float]]:
    """The generated run with a ``started`` before every end, then ``stuck`` rollouts that never end.

    Rollouts start every 0.5 s and end ``seconds`` later (events applied in time order); the
    stuck ones start after the last end, so the threshold no longer moves while they age.
    """
    rules = InflightRules(straggler_factor=3.0, min_samples=20, stall_after_s=60.0, eval_interval_s=INTERVAL)
    state = RunState(
        "r",
        RunStarted(kind="run_started", plan=run.plan),
        received_at=T0,
        engines=default_engines(),
        inflight_rules=rules,
    )
    timeline: list[tuple[float, int, dict[str, Any]]] = []
    for index, event in enumerate(run.events):
        start = progress_event("started", _row_of(event))
        begin = T0 + 0.5 * index
        if start is not None:
            timeline.append((begin, 2 * index, start))
        timeline.append((begin + float(event.get("seconds") or 0.0), 2 * index + 1, event))
    for at, _, body in sorted(timeline, key=lambda item: (item[0], item[1])):
        apply_event(state, _event(body), at)
    last = max(at for at, _, _ in timeline)
    starts = [last + 1.0 + 2.0 * index for index in range(stuck)]
    for index, at in enumerate(starts):
        apply_event(state, _event({"kind": "started", "task_index": 10_000 + index}), at)
    return state, starts


class TestStragglersOfAGeneratedRun:
    def test_flagged_within_one_interval_after_crossing_and_never_before(self) -> None:
        run = generate_run(num_tasks=20, repeats=3, seed=5, failure_rate=0.1, drained_fraction=0.0)
        state, starts = _replay_with_stuck_rollouts(run, stuck=3)
        assert len(state.inflight) == 3  # every ended rollout left the registry
        reference = run.local_tracker()
        threshold = state.straggler_threshold()
        assert threshold == 3.0 * reference.quantile(0.95)

        now = starts[-1]
        flagged: dict[int, float] = {}
        while len(flagged) < 3:
            now += INTERVAL
            for entry in state.inflight.evaluate(now, state.straggler_threshold())[0]:
                flagged[int(entry.task)] = now
        for index, started in enumerate(starts):
            at = flagged[10_000 + index]
            assert at - started > threshold  # never before crossing
            assert at - INTERVAL - started <= threshold  # the evaluation before had not crossed yet
        assert state.inflight.flags.stragglers == 3
        view = state.inflight.view(now, threshold)
        assert (view.count, view.stragglers, view.oldest_age_s) == (3, 3, now - starts[0])

    def test_heartbeats_keep_a_long_rollout_from_being_stalled(self) -> None:
        run = generate_run(num_tasks=10, repeats=3, seed=6, failure_rate=0.0, drained_fraction=0.0)
        state, starts = _replay_with_stuck_rollouts(run, stuck=2)
        beating, silent = ({"kind": "heartbeat", "task_index": 10_000 + i} for i in range(2))
        now = starts[-1]
        stall_at: dict[int, float] = {}
        for tick in range(1, 120):  # 10 minutes, ten times the stall limit
            now = starts[-1] + tick * INTERVAL
            assert state.heartbeat(_event(beating), now)
            if tick <= 3:
                assert state.heartbeat(_event(silent), now)
            for entry in state.inflight.evaluate(now, state.straggler_threshold())[1]:
                stall_at[int(entry.task)] = now
        assert list(stall_at) == [10_001]  # the silent one only
        last_beat = starts[-1] + 3 * INTERVAL
        assert 60.0 < stall_at[10_001] - last_beat <= 60.0 + INTERVAL
        view = state.inflight.view(now, state.straggler_threshold())
        assert (view.count, view.stalled) == (2, 1)

    def test_a_heartbeat_for_a_rollout_not_in_flight_registers_nothing(self) -> None:
        run = generate_run(num_tasks=4, repeats=2, seed=6)
        state, _ = _replay_with_stuck_rollouts(run, stuck=1)
        assert not state.heartbeat(_event({"kind": "heartbeat", "task_index": 77}), T0 + 1e6)
        assert not state.heartbeat(_event({"kind": "heartbeat", "task_index": 10_000, "attempt": 1}), T0)
        assert len(state.inflight) == 1

    def test_run_end_lists_what_was_in_flight_and_clears_it(self) -> None:
        run = generate_run(num_tasks=10, repeats=3, seed=8, failure_rate=0.0, drained_fraction=0.0)
        state, starts = _replay_with_stuck_rollouts(run, stuck=2)
        threshold = state.straggler_threshold()
        assert threshold is not None
        ended = starts[0] + threshold + 0.5  # the first crossed the threshold, the second not yet
        apply_event(state, _event({"kind": "run_ended"}), ended)
        assert len(state.inflight) == 0
        body = state.report()["inflight_at_end"]
        assert body["count"] == 2
        assert [(e["task_index"], e["age_s"]) for e in body["oldest"]] == [
            (10_000, ended - starts[0]),
            (10_001, ended - starts[1]),
        ]
        assert [e["straggling"] for e in body["oldest"]] == [True, False]
        assert body["straggler_threshold_s"] == threshold
        apply_event(state, _event({"kind": "started", "task_index": 5}), ended + 1)  # after the end: ignored
        assert len(state.inflight) == 0

    def test_a_start_after_the_rollout_succeeded_is_ignored(self) -> None:
        run = generate_run(num_tasks=4, repeats=1, seed=9, failure_rate=0.0, fault_rate=0.0)
        state, _ = _replay_with_stuck_rollouts(run, stuck=0)
        row = _row_of(run.events[0])
        late = progress_event("started", row)
        assert late is not None
        apply_event(state, _event(late), T0 + 1e6)
        assert len(state.inflight) == 0


class _Reference:
    """The rules computed the obvious way, by walking every entry (what the registry did before it
    kept its entries ordered): the ordered registry must agree with it exactly."""

    def __init__(self, rules: InflightRules) -> None:
        self.rules = rules
        #: key -> [attempt, started, last heartbeat, flagged at, stalled at]
        self.entries: dict[tuple[int, int], list[Any]] = {}

    def started(self, key: tuple[int, int], attempt: int, at: float) -> None:
        current = self.entries.get(key)
        if current is not None and attempt <= current[0]:
            return
        self.entries.pop(key, None)
        if current is None and len(self.entries) >= self.rules.max_tracked:
            return
        self.entries[key] = [attempt, at, None, None, None]

    def ended(self, key: tuple[int, int], attempt: int | None) -> None:
        current = self.entries.get(key)
        if current is not None and (attempt is None or current[0] <= attempt):
            del self.entries[key]

    def heartbeat(self, key: tuple[int, int], attempt: int, at: float) -> None:
        current = self.entries.get(key)
        if current is not None and current[0] == attempt:
            current[2] = at if current[2] is None else max(current[2], at)
            current[4] = None

    def evaluate(self, now: float, threshold: float | None) -> tuple[set[Any], set[Any]]:
        flagged, stalled = set(), set()
        for key, entry in self.entries.items():
            if entry[3] is None and threshold is not None and now - entry[1] > threshold:
                entry[3] = now
                flagged.add(key)
            if entry[2] is not None and now - entry[2] > self.rules.stall_after_s and entry[4] is None:
                entry[4] = now
                stalled.add(key)
        return flagged, stalled

    def view(self, now: float, threshold: float | None) -> tuple[Any, ...]:
        ages = sorted(now - entry[1] for entry in self.entries.values())
        quantiles = {
            label: ages[max(0, math.ceil(q * len(ages)) - 1)]
            for label, q in (("0.5", 0.5), ("0.95", 0.95), ("1.0", 1.0))
            if ages
        }
        stragglers = 0 if threshold is None else sum(1 for age in ages if age > threshold)
        stalled = sum(
            1 for e in self.entries.values() if e[2] is not None and now - e[2] > self.rules.stall_after_s
        )
        return len(ages), (ages[-1] if ages else None), quantiles, stragglers, stalled


class TestOrderedRegistry:
    @pytest.mark.parametrize("seed", range(6))
    def test_agrees_with_a_full_walk_after_random_events(self, seed: int) -> None:
        import random

        rng = random.Random(seed)
        rules = InflightRules(stall_after_s=7.0, max_tracked=150)
        registry, reference = InflightRegistry(rules), _Reference(rules)
        now = T0
        for step in range(3000):
            now += rng.choice((0.0, 0.0, 0.1, 0.37, 1.0))  # ties: a batch shares its arrival time
            key = (rng.randrange(200), rng.randrange(2))
            action = rng.random()
            if action < 0.45:
                attempt = rng.randrange(3)
                at = now - rng.choice((0.0, 0.0, 3.0))  # now and then out of arrival order
                registry.started(key, attempt, at)
                reference.started(key, attempt, at)
            elif action < 0.7:
                attempt = rng.choice((None, 0, 1, 2))
                registry.ended(key, attempt)
                reference.ended(key, attempt)
            elif action < 0.9:
                attempt = rng.randrange(3)
                at = now - rng.choice((0.0, 2.0))
                registry.heartbeat(key, attempt, at)
                reference.heartbeat(key, attempt, at)
            elif step % 7 == 0:
                threshold = rng.choice((None, 2.0, 5.0, 11.0))
                stragglers, stalls = registry.evaluate(now, threshold)
                assert ({(e.task, e.rollout) for e in stragglers}, {(e.task, e.rollout) for e in stalls}) == (
                    reference.evaluate(now, threshold)
                )
            threshold = rng.choice((None, 0.5, 4.0))
            view = registry.view(now, threshold)
            assert (
                view.count,
                view.oldest_age_s,
                view.age_quantiles,
                view.stragglers,
                view.stalled,
            ) == reference.view(now, threshold)
            oldest = registry.oldest(5)
            starts = sorted(entry[1] for entry in reference.entries.values())[:5]
            assert [entry.started_at for entry in oldest] == starts
        assert len(registry) == len(reference.entries)
        again = InflightRegistry.from_snapshot(orjson.loads(orjson.dumps(registry.to_snapshot())), rules)
        assert again.view(now, 4.0).stragglers == registry.view(now, 4.0).stragglers

    def test_a_budget_caps_entries_over_every_registry_sharing_it(self) -> None:
        budget = InflightBudget(3)
        first, second = InflightRegistry(budget=budget), InflightRegistry(budget=budget)
        assert [first.started((i, 0), 0, T0) for i in range(2)] == [True, True]
        assert [second.started((i, 0), 0, T0) for i in range(2)] == [True, False]
        assert (budget.held, first.untracked, second.untracked) == (3, 0, 1)
        assert first.started((0, 0), 1, T0 + 1)  # a retry replaces its attempt: no new entry
        first.ended((1, 0), None)
        assert second.started((5, 0), 0, T0) and budget.held == 3
        first.clear()  # the run ended: its entries leave the budget
        assert budget.held == 2 and second.started((6, 0), 0, T0)
        with pytest.raises(ValueError, match="0"):
            InflightBudget(0)

    def test_straggler_counts_at_several_times_equal_the_view_at_each(self) -> None:
        registry = InflightRegistry()
        for index in range(50):
            registry.started((index, 0), 0, T0 + (index // 5))  # ties: five start at each moment
        times = [T0 + offset for offset in (0.0, 3.5, 10.0, 12.0, 60.0)]
        expected = [registry.view(now, 2.0).stragglers for now in times]
        assert registry.straggler_counts(times, 2.0) == expected == [0, 10, 40, 50, 50]
        assert registry.straggler_counts(times, None) == [0] * 5
