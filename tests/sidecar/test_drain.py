"""The drain decision (drain when the margin exceeds the time left) and the drained result row."""

from __future__ import annotations

import pytest

from sidecar.perf import DRAINED_FAILURE_CLASS, drained_result, should_drain


class TestShouldDrain:
    @pytest.mark.parametrize(
        ("remaining", "margin", "expected"),
        [
            (0.0, None, True),
            (-1.0, None, True),
            (0.1, None, False),
            (40.0, 40.0, False),  # equal is dispatched
            (39.9, 40.0, True),
            (39.9, 0.0, False),
            (0.0, 0.0, True),
        ],
    )
    def test_rule(self, remaining: float, margin: float | None, expected: bool) -> None:
        assert should_drain(remaining, margin) is expected


class TestDrainedResult:
    def test_shape(self) -> None:
        result = drained_result(0.0, None)
        assert list(result) == [
            "_ng_failure_class",
            "_ng_no_persist",
            "_ng_dispatch_drained",
            "error_message",
        ]
        assert result["_ng_failure_class"] == DRAINED_FAILURE_CLASS == "cancelled"
        assert result["error_message"] == "not dispatched: dispatch budget exhausted"

    @pytest.mark.parametrize(
        ("remaining", "margin", "message"),
        [
            (-0.4, 0.0, "not dispatched: -0s left in dispatch budget, below the 0s drain margin"),
            (-12.2, 30.0, "not dispatched: -12s left in dispatch budget, below the 30s drain margin"),
            (39.9, 40.0, "not dispatched: 40s left in dispatch budget, below the 40s drain margin"),
            (2.5, 3.5, "not dispatched: 2s left in dispatch budget, below the 4s drain margin"),
        ],
    )
    def test_margin_wording_rounds_half_to_even(self, remaining: float, margin: float, message: str) -> None:
        assert drained_result(remaining, margin)["error_message"] == message
