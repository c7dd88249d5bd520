"""DispatchLatencyTracker: the conformance vectors, a naive reference model, rates, exported numbers
and snapshots."""

from __future__ import annotations

import json
import math
import random
from bisect import insort
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sidecar.perf import DispatchLatencyTracker, drained_result, should_drain

# Enough samples for the sorted store to span many sublists.
LARGE_PREFIX_SIZE = 40_000
QUANTILES = (0.0, 0.01, 0.1, 0.25, 1 / 3, 0.5, 0.75, 0.9, 0.95, 0.99, 1.0)


def _same(a: object, b: object) -> bool:
    """Equal values of the same JSON type (``10`` and ``10.0`` differ), compared as orjson bytes."""
    return orjson.dumps(a) == orjson.dumps(b)


@pytest.fixture(scope="module")
def tracker_cases(spec_examples: Path) -> list[dict[str, Any]]:
    lines = (spec_examples / "tracker_cases.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _replay(ops: list[dict[str, Any]], tracker: DispatchLatencyTracker) -> None:
    for op in ops:
        if op["op"] == "record":
            tracker.record(op["seconds"])
        elif op["op"] == "record_failure":
            tracker.record_failure(op["seconds"])
        elif op["op"] == "record_drained":
            tracker.record_drained()
        else:
            raise AssertionError(f"unknown op {op!r}")


class TestVectors:
    def test_every_case_is_reproduced_exactly(self, tracker_cases: list[dict[str, Any]]) -> None:
        assert len(tracker_cases) >= 11
        for case in tracker_cases:
            tracker = DispatchLatencyTracker()
            _replay(case["ops"], tracker)
            expected = case["expected"]
            where = f"tracker case {case['id']!r}"
            assert _same(tracker.samples(), expected["durations_sorted"]), where
            assert tracker.drained == expected["drained"], where
            assert tracker.count == len(expected["durations_sorted"]), where
            for q, value in expected["quantiles"]:
                assert _same(tracker.quantile(q), value), f"{where}: quantile({q})"
            for configured, value in expected["drain_margin"]:
                assert _same(tracker.drain_margin(configured), value), f"{where}: drain_margin({configured})"
            assert tracker.summary() == expected["summary"], where

    def test_drain_checks(self, tracker_cases: list[dict[str, Any]]) -> None:
        checked = 0
        for case in tracker_cases:
            tracker = DispatchLatencyTracker()
            _replay(case["ops"], tracker)
            for check in case["expected"].get("drain_checks", []):
                where = f"tracker case {case['id']!r}, check {check!r}"
                margin = tracker.drain_margin(check["drain_margin_s"])
                assert _same(margin, check["margin_used"]), where
                drained = should_drain(check["remaining_s"], margin)
                assert drained is check["drained"], where
                if drained:
                    assert _same(drained_result(check["remaining_s"], margin), check["drained_result"]), where
                else:
                    assert check["drained_result"] is None, where
                checked += 1
        assert checked >= 10


@dataclass
class NaiveTracker:
    """NeMo Gym's tracker written the obvious way: a sorted list and its quantile formula."""

    samples: list[float] = field(default_factory=list)
    drained: int = 0

    def record(self, seconds: float) -> None:
        if seconds > 0:
            insort(self.samples, seconds)

    def record_failure(self, seconds: float) -> None:
        if not self.samples:
            return
        if seconds >= self.quantile(0.5):  # type: ignore[operator]
            insort(self.samples, seconds)

    def record_drained(self) -> None:
        self.drained += 1

    def quantile(self, q: float) -> float | None:
        x = self.samples
        if not x:
            return None
        p = (len(x) - 1) * q
        i = math.trunc(p)
        j = min(i + 1, len(x) - 1)
        f = p - i
        return x[i] * (1 - f) + x[j] * f

    def drain_margin(self, configured: float | None) -> float | None:
        if configured is not None:
            return configured
        if len(self.samples) < 5:
            return None
        return self.quantile(0.75)


durations = st.one_of(
    st.floats(min_value=-10.0, max_value=1e5),
    st.integers(min_value=-5, max_value=20_000),
    st.sampled_from([0, 0.0, 0.1, 0.2, 0.3, 1e-9, 600, 600.0, float("nan")]),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("record"), durations),
        st.tuples(st.just("record_failure"), durations),
        st.tuples(st.just("record_drained"), st.none()),
    ),
    max_size=80,
)


def _apply(ops: list[tuple[str, Any]], *trackers: Any) -> None:
    for name, seconds in ops:
        for tracker in trackers:
            if name == "record_drained":
                tracker.record_drained()
            else:
                getattr(tracker, name)(seconds)


def _assert_matches_naive(tracker: DispatchLatencyTracker, naive: NaiveTracker) -> None:
    assert _same(tracker.samples(), naive.samples)
    assert tracker.count == len(naive.samples)
    assert tracker.drained == naive.drained
    for q in QUANTILES:
        assert _same(tracker.quantile(q), naive.quantile(q)), q
    for configured in (None, 0.0, 0, 12.5):
        assert _same(tracker.drain_margin(configured), naive.drain_margin(configured)), configured


@pytest.fixture(scope="module")
def large_prefix() -> list[float]:
    rng = random.Random(20261202)
    values: list[float] = []
    for _ in range(LARGE_PREFIX_SIZE):
        values.append(rng.lognormvariate(6, 1) if rng.random() < 0.9 else rng.randint(1, 9000))
    return values


class TestAgainstNaiveModel:
    @settings(max_examples=150, deadline=None)
    @given(ops=operations)
    def test_small_runs(self, ops: list[tuple[str, Any]]) -> None:
        tracker, naive = DispatchLatencyTracker(), NaiveTracker()
        _apply(ops, tracker, naive)
        _assert_matches_naive(tracker, naive)

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(ops=operations)
    def test_large_runs(self, large_prefix: list[float], ops: list[tuple[str, Any]]) -> None:
        tracker, naive = DispatchLatencyTracker(), NaiveTracker()
        naive.samples = sorted(large_prefix)
        for seconds in large_prefix:
            tracker.record(seconds)
        # The hot path answers every interleaved drain check exactly, not only at the end.
        for name, seconds in ops:
            _apply([(name, seconds)], tracker, naive)
            assert _same(tracker.drain_margin(None), naive.drain_margin(None))
        _assert_matches_naive(tracker, naive)

    def test_interleaved_growth(self) -> None:
        rng = random.Random(7)
        tracker, naive = DispatchLatencyTracker(), NaiveTracker()
        for step in range(LARGE_PREFIX_SIZE):
            seconds = rng.choice([rng.uniform(1, 5000), rng.randint(1, 100)])
            if step % 7 == 0:
                tracker.record_failure(seconds)
                naive.record_failure(seconds)
            else:
                tracker.record(seconds)
                naive.record(seconds)
            assert _same(tracker.drain_margin(None), naive.drain_margin(None)), step
        _assert_matches_naive(tracker, naive)

    def test_an_int_sample_after_float_ones_stays_an_int(self) -> None:
        tracker, naive = DispatchLatencyTracker(), NaiveTracker()
        floats = [float(value) + 0.5 for value in range(20_000)]
        random.Random(3).shuffle(floats)
        _apply([("record", value) for value in floats] + [("record", 7), ("record", 7.0)], tracker, naive)
        _assert_matches_naive(tracker, naive)
        assert [repr(value) for value in tracker.samples()[6:9]] == ["6.5", "7", "7.0"]


class TestSeedRules:
    def test_configured_margin_wins_even_zero_and_without_samples(self) -> None:
        tracker = DispatchLatencyTracker()
        assert tracker.drain_margin(0.0) == 0.0
        assert tracker.drain_margin(None) is None

    def test_adaptive_margin_needs_five_samples(self) -> None:
        tracker = DispatchLatencyTracker()
        for seconds in (10, 20, 30, 40):
            tracker.record(seconds)
        assert tracker.drain_margin(None) is None
        tracker.record(50)
        assert tracker.drain_margin(None) == 40.0

    def test_failure_before_any_completion_is_ignored(self) -> None:
        tracker = DispatchLatencyTracker()
        tracker.record_failure(3600)
        assert tracker.quantile(0.5) is None
        assert tracker.count == 0

    def test_kept_failure_counts_as_sample_not_completion(self) -> None:
        tracker = DispatchLatencyTracker()
        for seconds in (10, 20, 30, 40, 50):
            tracker.record(seconds)
        tracker.record_failure(600)
        assert tracker.quantile(1.0) == 600
        assert tracker.drain_margin(None) == 47.5
        assert tracker.count == 6
        assert "over 6 completed rollout(s)" in tracker.summary()

    def test_failure_never_changes_drained(self) -> None:
        tracker = DispatchLatencyTracker()
        tracker.record(5)
        tracker.record_failure(100)
        tracker.record_drained()
        assert tracker.drained == 1

    def test_task_hours_are_the_exact_sum(self) -> None:
        # Added left to right these fall just short of 180 s, so a naive sum reports 0.0
        # task-hours; the reference (CPython 3.13's compensated sum) reports 0.1 (verified by
        # running it on these samples).
        samples = [0.1] + [0.2] * 8 + [0.3] * 10 + [0.7] * 9 + [1.1] * 3 + [165.7]
        naive = 0.0
        for seconds in sorted(samples):
            naive += seconds
        assert f"{naive / 3600:.1f}" == "0.0"
        tracker = DispatchLatencyTracker()
        for seconds in samples:
            tracker.record(seconds)
        assert tracker.summary().splitlines()[1] == "Task-time delivered: 0.1 task-hours"

    def test_an_infinite_sample_is_kept(self) -> None:
        tracker = DispatchLatencyTracker()
        for seconds in (10, 20, math.inf):
            tracker.record(seconds)
        assert tracker.samples()[-1] == math.inf and tracker.total_seconds == math.inf
        assert math.isnan(tracker.quantile(1.0))  # type: ignore[arg-type]  # inf * 0 in the formula
        assert "max inf min" in tracker.summary() and "inf task-hours" in tracker.summary()


class TestExportedNumbers:
    @pytest.mark.parametrize("size", [100, LARGE_PREFIX_SIZE])
    def test_total_seconds(self, size: int) -> None:
        rng = random.Random(size)
        values = [rng.uniform(0.1, 9000) for _ in range(size)]
        tracker = DispatchLatencyTracker()
        for seconds in values:
            tracker.record(seconds)
        tracker.record(-3.0)
        assert tracker.total_seconds == math.fsum(values)  # the exact sum, correctly rounded


def _iter_ops(tracker_cases: list[dict[str, Any]]) -> Iterator[str]:
    for case in tracker_cases:
        for op in case["ops"]:
            yield op["op"]


def test_vectors_cover_every_operation(tracker_cases: list[dict[str, Any]]) -> None:
    assert set(_iter_ops(tracker_cases)) == {"record", "record_failure", "record_drained"}


def _answers(tracker: DispatchLatencyTracker) -> bytes:
    """Every answer the tracker gives, as bytes (types and NaN-free floats compared exactly)."""
    return orjson.dumps(
        {
            "samples": tracker.samples(),
            "count": tracker.count,
            "drained": tracker.drained,
            "quantiles": [tracker.quantile(q) for q in QUANTILES],
            "margins": [tracker.drain_margin(c) for c in (None, 0.0, 12.5)],
            "summary": tracker.summary(),
            "total_seconds": tracker.total_seconds,
        }
    )


def _through_msgpack(data: Any) -> Any:
    return msgspec.msgpack.decode(msgspec.msgpack.encode(data))


snapshot_steps = st.lists(
    st.one_of(
        operations.flatmap(lambda ops: st.just(("ops", ops))),
    ),
    max_size=12,
)


class TestSnapshots:
    @settings(max_examples=100, deadline=None)
    @given(before=snapshot_steps, after=snapshot_steps)
    def test_a_round_trip_answers_and_goes_on_identically(
        self, before: list[tuple[str, Any]], after: list[tuple[str, Any]]
    ) -> None:
        tracker = DispatchLatencyTracker()

        def step(steps: list[tuple[str, Any]], *trackers: DispatchLatencyTracker) -> None:
            for _, value in steps:
                _apply(value, *trackers)

        step(before, tracker)
        copy = DispatchLatencyTracker.from_snapshot(_through_msgpack(tracker.to_snapshot()))
        assert _answers(copy) == _answers(tracker)
        step(after, tracker, copy)
        assert _answers(copy) == _answers(tracker)
        assert msgspec.msgpack.encode(copy.to_snapshot()) == msgspec.msgpack.encode(tracker.to_snapshot())

    def test_ints_past_64_bits_infinity_and_bools_survive(self) -> None:
        tracker = DispatchLatencyTracker()
        for seconds in (True, 5, 2.5, 2**64, 10**30, math.inf):
            tracker.record(seconds)
        data = _through_msgpack(tracker.to_snapshot())
        assert data["samples"] == [True, 2.5, 5, str(2**64), str(10**30), math.inf]
        copy = DispatchLatencyTracker.from_snapshot(data)
        assert [repr(value) for value in copy.samples()] == [repr(value) for value in tracker.samples()]

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (lambda d: d.pop("drained"), "keys"),
            (lambda d: d.update(extra=1), "keys"),
            (lambda d: d.update(samples="1,2"), "samples must be a list"),
            (lambda d: d.update(samples=[2.0, 1.0]), "not in ascending order"),
            (lambda d: d.update(samples=[1.0, math.nan]), r"samples\[1\] is not a number"),
            (lambda d: d.update(samples=[0.0, 1.0]), "must be > 0"),
            (lambda d: d.update(samples=["12"]), "is not a number"),  # a small int is never digits
            (lambda d: d.update(samples=[["os.system", "id"]]), "is not a number"),
            (lambda d: d.update(drained=True), "drained must be an int"),
            (lambda d: d.update(drained=-1), "drained must be an int"),
        ],
    )
    def test_a_wrong_shape_is_refused_by_name(self, change: Any, message: str) -> None:
        tracker = DispatchLatencyTracker()
        tracker.record(1.0)
        data = tracker.to_snapshot()
        change(data)
        with pytest.raises(ValueError, match=message):
            DispatchLatencyTracker.from_snapshot(data)

    @pytest.mark.parametrize("data", [None, [], "snapshot", 3])
    def test_not_a_mapping_is_refused(self, data: Any) -> None:
        with pytest.raises(ValueError, match="tracker snapshot"):
            DispatchLatencyTracker.from_snapshot(data)
