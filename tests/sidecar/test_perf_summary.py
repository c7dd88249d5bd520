"""perf_summary: the vectors exactly, the statistics' definitions (totals as CPython 3.12+'s
``sum``), reads between rows equal a whole sort, and snapshots."""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.perf import PerfSummaryState, compute_perf_summary


@pytest.fixture(scope="module")
def perf_summary_cases(spec_examples: Path) -> list[dict[str, Any]]:
    lines = (spec_examples / "perf_summary_cases.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


class TestVectors:
    def test_every_case_is_exact(self, perf_summary_cases: list[dict[str, Any]]) -> None:
        assert len(perf_summary_cases) >= 6
        for case in perf_summary_cases:
            given_input = case["input"]
            summary = compute_perf_summary(given_input["ng_perf_records"], given_input["total_rollouts"])
            # Exact, key order and int/float types included (stricter than a 1e-9 tolerance).
            assert orjson.dumps(summary) == orjson.dumps(case["expected"]["perf_summary"]), case["id"]


class TestRules:
    def test_missing_fields_are_not_zero(self) -> None:
        summary = compute_perf_summary([{"num_turns": 2}, {"num_turns": 4, "prompt_tokens": 10}], 2)
        assert summary is not None
        assert summary["mean_prompt_tokens"] == 10.0
        assert summary["total_prompt_tokens"] == 10
        assert "mean_tokens_per_turn" not in summary
        assert "total_latency_p50_ms" not in summary

    def test_non_numbers_are_skipped(self) -> None:
        summary = compute_perf_summary([{"num_turns": "3", "total_latency_ms": None}, {"num_turns": 1}], 2)
        assert summary is not None
        assert summary["max_num_turns"] == 1
        assert "total_latency_mean_ms" not in summary

    def test_percentile_upper_half_uses_numpy_order(self) -> None:
        # 0.9 * 4 = 3.6: t >= 0.5, so numpy evaluates b - (b - a) * (1 - t).
        summary = compute_perf_summary([{"total_latency_ms": v} for v in (0.1, 0.2, 0.3, 0.7, 1.1)], 5)
        assert summary is not None
        assert summary["total_latency_p90_ms"] == 1.1 - (1.1 - 0.7) * (1 - 0.6000000000000001)

    def test_add_rejects_non_objects(self) -> None:
        with pytest.raises(TypeError, match="ng_perf must be a JSON object"):
            PerfSummaryState().add([1, 2])  # type: ignore[arg-type]


class TestTypes:
    """Every value reads back as it came in: an ``int`` stays an ``int``, a ``bool`` a ``bool``."""

    @pytest.mark.parametrize(
        "values",
        [
            [3, 1, 2],
            [1.5, 0.5, 2.0],
            [3, 1.5, 2],  # int then float: falls back to a list
            [2.0, 7, 1],
            [True, 2, False],
            [2, True, 3],
            [2**63 - 1, 2**63, 1],  # past 64 bits
            [-(2**63), 5],
        ],
    )
    def test_types_and_values_survive(self, values: list[Any]) -> None:
        state = PerfSummaryState()
        for value in values:
            state.add({"num_turns": value, "prompt_tokens": value, "total_latency_ms": value})
        summary = state.result(len(values))
        assert summary is not None
        assert repr(summary["min_num_turns"]) == repr(min(values))
        assert repr(summary["max_num_turns"]) == repr(max(values))
        assert repr(summary["median_prompt_tokens"]) == repr(statistics.median(values))
        assert repr(summary["total_prompt_tokens"]) == repr(sum(values))


class TestTotals:
    """``total_*`` is CPython 3.12+'s ``sum()`` in arrival order, as the reference (3.13) adds."""

    def test_ints_then_floats_with_compensation(self) -> None:
        # 3.13's sum gives ...1351; a correctly rounded sum ...1351000001, left-to-right ...1350999998
        values = [292210.21, 277569, 97389.9951, 268827.93]
        summary = compute_perf_summary([{"prompt_tokens": value} for value in values], 4)
        assert summary is not None and repr(summary["total_prompt_tokens"]) == "935997.1351"

    @pytest.mark.skipif(sys.version_info < (3, 12), reason="built-in sum() compensates from 3.12 on")
    @settings(max_examples=200, deadline=None)
    @given(st.lists(st.one_of(st.integers(-(2**62), 2**62), st.floats(-1e300, 1e300)), min_size=1))
    def test_as_the_builtin_sum(self, values: list[Any]) -> None:
        summary = compute_perf_summary([{"completion_tokens": value} for value in values], len(values))
        assert summary is not None and repr(summary["total_completion_tokens"]) == repr(sum(values))


class TestFiniteStatistics:
    """Where the reference's float arithmetic overflows, the exact statistic saturates instead."""

    def test_int_totals_past_64_bits_stay_exact(self) -> None:
        records = [{"num_turns": 1, "prompt_tokens": 2**64 - 1}, {"num_turns": 1, "prompt_tokens": 2**64 - 1}]
        summary = compute_perf_summary(records, 2)
        assert summary is not None
        assert summary["total_prompt_tokens"] == 2 * (2**64 - 1)
        assert summary["mean_prompt_tokens"] == float(2**64 - 1)

    def test_means_past_the_double_range_are_exact_then_saturated(self) -> None:
        big = int(1.7e308)
        records = [{"num_turns": 1, "prompt_tokens": big}, {"num_turns": 1, "prompt_tokens": big}]
        summary = compute_perf_summary(records, 2)
        assert summary is not None
        assert summary["mean_prompt_tokens"] == 1.7e308 and summary["median_prompt_tokens"] == 1.7e308

    def test_latency_overflow_and_cancellation_give_the_exact_value(self) -> None:
        records = [{"num_turns": 1, "total_latency_ms": -1e308}, {"num_turns": 1, "total_latency_ms": 1e308}]
        summary = compute_perf_summary(records, 2)
        assert summary is not None
        assert summary["total_latency_p50_ms"] == 0.0 and summary["total_latency_mean_ms"] == 0.0
        huge = [{"num_turns": 1, "total_latency_ms": 1e308}] * 2
        assert compute_perf_summary(huge, 2)["total_latency_mean_ms"] == 1e308  # type: ignore[index]

    def test_a_ratio_past_the_double_range_saturates(self) -> None:
        summary = compute_perf_summary([{"num_turns": 0.5, "completion_tokens": 1e308}], 1)
        assert summary is not None
        assert summary["mean_tokens_per_turn"] == sys.float_info.max


_ORDER_VALUES = st.one_of(
    st.integers(-5, 5),
    st.sampled_from([0.0, -0.0, 1.0, 2.0, -1.0, 2.5, True, False]),
    st.floats(-10, 10, width=16),
)


def _sorted_reference(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Order statistics computed by sorting each column whole (what every read used to do)."""
    turns = [row["num_turns"] for row in rows]
    latency = [row["total_latency_ms"] for row in rows]

    def percentile(values: list[Any], q: float) -> float:
        ordered = sorted(values)
        if not all(type(value) in (int, bool) for value in ordered):
            ordered = [float(value) for value in ordered]
        position = (len(ordered) - 1) * q
        below = int(position)
        if below >= len(ordered) - 1:
            return float(ordered[-1])
        low, high, fraction = ordered[below], ordered[below + 1], position - below
        diff = high - low
        return float(high - diff * (1 - fraction)) if fraction >= 0.5 else float(low + diff * fraction)

    return {
        "median_num_turns": statistics.median(turns),
        "min_num_turns": min(turns),
        "max_num_turns": max(turns),
        "p90_num_turns": percentile(turns, 0.9),
        "median_prompt_tokens": statistics.median(row["prompt_tokens"] for row in rows),
        "total_latency_p50_ms": percentile(latency, 0.5),
        "total_latency_p99_ms": percentile(latency, 0.99),
    }


class TestIncrementalOrder:
    """Reads keep an ordered copy up to date as rows arrive; every read equals a whole sort."""

    @settings(max_examples=60, deadline=None)
    @given(
        st.lists(st.tuples(_ORDER_VALUES, _ORDER_VALUES, _ORDER_VALUES), min_size=1, max_size=60),
        st.sets(st.integers(0, 59)),
    )
    def test_reads_between_rows_equal_a_whole_sort(
        self, triples: list[tuple[Any, Any, Any]], read_after: set[int]
    ) -> None:
        state = PerfSummaryState()
        rows: list[dict[str, Any]] = []
        for position, (turns, latency, prompt) in enumerate(triples):
            row = {"num_turns": turns, "total_latency_ms": latency, "prompt_tokens": prompt}
            state.add(row)
            rows.append(row)
            if position in read_after or position == len(triples) - 1:
                got = state.result(len(rows))
                assert got is not None
                for key, value in _sorted_reference(rows).items():
                    # same value and same type (1 and 1.0 and True render differently)
                    assert (key, repr(got[key])) == (key, repr(value))


_ROW = st.fixed_dictionaries(
    {},
    optional={
        "num_turns": _ORDER_VALUES,
        "total_latency_ms": _ORDER_VALUES,
        "prompt_tokens": _ORDER_VALUES,
        "completion_tokens": st.integers(0, 9),
        "token_observability_coverage": st.sampled_from([0, 1, 0.5]),
    },
)


_VALUES = st.one_of(
    st.integers(-(2**53), 2**53),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e300, max_value=1e300),
    st.booleans(),
)


class TestStatistics:
    """Each statistic is the standard library's over the reported values (as the reference's)."""

    @settings(max_examples=200, deadline=None)
    @given(st.lists(_VALUES, min_size=1, max_size=40))
    def test_as_statistics_computes_them(self, values: list[Any]) -> None:
        summary = compute_perf_summary([{"num_turns": v} for v in values], len(values))
        assert summary is not None
        assert repr(summary["mean_num_turns"]) == repr(statistics.fmean(values))
        assert repr(summary["std_num_turns"]) == repr(statistics.pstdev(values))
        assert repr(summary["median_num_turns"]) == repr(statistics.median(values))
        assert repr(summary["min_num_turns"]) == repr(min(values))
        assert repr(summary["max_num_turns"]) == repr(max(values))

    def test_values_that_are_not_finite_numbers_are_not_reported(self) -> None:
        rows = [
            {"num_turns": math.nan, "prompt_tokens": math.inf, "total_latency_ms": -math.inf},
            {"num_turns": 2, "completion_tokens": math.nan, "total_latency_ms": 5.0},
        ]
        assert compute_perf_summary(rows, 2) == compute_perf_summary(
            [{}, {"num_turns": 2, "total_latency_ms": 5.0}], 2
        )


_ROW = st.fixed_dictionaries(
    {},
    optional={
        "num_turns": _ORDER_VALUES,
        "total_latency_ms": st.one_of(_ORDER_VALUES, st.integers(2**64, 2**70)),
        "prompt_tokens": st.one_of(_ORDER_VALUES, st.integers(2**64, 2**70)),
        "completion_tokens": st.integers(0, 9),
        "token_observability_coverage": st.sampled_from([0, 1, 0.5]),
    },
)


def _through_msgpack(data: Any) -> Any:
    return msgspec.msgpack.decode(msgspec.msgpack.encode(data))


class TestSnapshots:
    @settings(max_examples=100, deadline=None)
    @given(st.lists(_ROW, max_size=30), st.lists(_ROW, max_size=10))
    def test_a_round_trip_answers_and_goes_on_identically(
        self, before: list[dict[str, Any]], after: list[dict[str, Any]]
    ) -> None:
        state = PerfSummaryState()
        for row in before:
            state.add(row)
        copy = PerfSummaryState.from_snapshot(_through_msgpack(state.to_snapshot()))
        # repr: same values, types and key order (orjson has no ints past 64 bits)
        assert repr(copy.result(len(before) + 1)) == repr(state.result(len(before) + 1))
        for row in after:
            state.add(row)
            copy.add(row)
        total = len(before) + len(after)
        assert repr(copy.result(total)) == repr(state.result(total))
        assert repr(copy.result(total)) == repr(compute_perf_summary(before + after, total))
        assert msgspec.msgpack.encode(copy.to_snapshot()) == msgspec.msgpack.encode(state.to_snapshot())

    @pytest.mark.parametrize(
        ("change", "message"),
        [
            (lambda d: d.pop("records"), "keys"),
            (lambda d: d.update(records=-1), "records must be an int"),
            (lambda d: d.update(records=1.0), "records must be an int"),
            (lambda d: d.update(token_covered=3), r"token_covered must be an int in \[0, 2\]"),
            (lambda d: d["fields"].pop("num_turns"), "perf summary fields has the keys"),
            (lambda d: d.update(fields=[]), "perf summary fields has the keys .*, not a list"),
            (lambda d: d.update(totals={}), "perf summary totals has the keys"),
            (
                lambda d: d["totals"].update(prompt_tokens=[1.5, 0.0, 0.0]),
                r"totals\['prompt_tokens'\] is \[int",
            ),
            (
                lambda d: d["totals"].update(prompt_tokens=["5", 0.0, 0.0]),
                r"totals\['prompt_tokens'\] is \[int",
            ),
            (
                lambda d: d["totals"].update(prompt_tokens=[None, 0, 0.0]),
                r"totals\['prompt_tokens'\] is \[int",
            ),
            (lambda d: d["fields"].update(num_turns=[3, 1]), "num_turns is not in ascending order"),
            (lambda d: d["fields"].update(num_turns=[1, 2, 3]), "num_turns holds 3 values of 2 records"),
            (
                lambda d: d["fields"].update(total_latency_ms=[math.inf]),
                "total_latency_ms holds a value that is not",
            ),
            (
                lambda d: d["fields"].update(num_turns=[-math.inf]),
                "num_turns holds a value that is not finite",
            ),
            (lambda d: d["fields"].update(prompt_tokens=[{"__reduce__": "os.system"}]), "is not a number"),
        ],
    )
    def test_a_wrong_shape_is_refused_by_name(self, change: Any, message: str) -> None:
        state = PerfSummaryState()
        for turns in (1, 2):
            state.add({"num_turns": turns, "token_observability_coverage": 1.0, "total_latency_ms": 3.5})
        data = state.to_snapshot()
        change(data)
        with pytest.raises(ValueError, match=message):
            PerfSummaryState.from_snapshot(data)

    @pytest.mark.parametrize("data", [None, [], "snapshot", {"records": 0}, {1: 2, "records": 0}])
    def test_not_a_snapshot_is_refused(self, data: Any) -> None:
        with pytest.raises(ValueError, match="perf summary snapshot"):
            PerfSummaryState.from_snapshot(data)
