"""Token counts past 64 bits and numbers past every range: no 5xx, finite outputs, refusals named."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.reliability_harness.poison import OUT_OF_RANGE, POISON_TOKENS, poison_row, run_poison
from tests.reliability_harness.sidecar_process import Launch

from .conftest import no_violations

pytestmark = pytest.mark.timeout(180)


class TestPoison:
    def test_poison_rows_and_out_of_range_numbers(self, tmp_path: Path, launch: Launch) -> None:
        result = run_poison(tmp_path, launch=launch, num_tasks=8)
        no_violations(result.violations)
        assert result.poisoned_rows > 0 and result.duplicates == result.accepted
        assert result.refused_422 == len(OUT_OF_RANGE)
        assert result.reports_checked == 2 and result.metric_scrapes > 2
        assert result.largest_token_total >= 2 * (2**64 - 1)  # exact, as NeMo Gym's build_ng_perf sums

    def test_poison_row_puts_uint64_max_on_the_first_two_calls(self) -> None:
        row = {"ng_trajectory": {"model_calls": [{"token_stats": {}} for _ in range(3)]}}
        calls = poison_row(row, random.Random(1))["ng_trajectory"]["model_calls"]
        assert [max(c["token_stats"].values()) for c in calls[:2]] == [2**64 - 1, 2**64 - 1]
        assert set(calls[2]["token_stats"].values()) <= set(POISON_TOKENS)
