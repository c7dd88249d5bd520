"""/report, /metrics and /inflight polled back to back, OTLP pushing, while /drain_margin is
polled: every answer 200.

The latency promise (p99 under 5 ms) is a benchmark figure: ``python -m tests.reliability_harness
--only blocking-reads``; here only correctness is asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.blocking_reads import run_blocking_reads
from tests.reliability_harness.sidecar_process import Launch

from .conftest import no_violations

pytestmark = pytest.mark.timeout(300)


class TestBlockingReads:
    def test_reads_off_the_loop_answer_while_drain_margin_is_polled(
        self, tmp_path: Path, launch: Launch
    ) -> None:
        result = run_blocking_reads(
            tmp_path, launch=launch, num_tasks=1500, inflight=5000, seconds=3.0, p99_bound_ms=0
        )
        no_violations(result.violations)
        assert result.reports >= 2 and result.scrapes >= 2 and result.trickled > 5
        assert result.inflight_reads >= 2 and result.otlp_pushes >= 2
        assert len(result.loaded_ms) > 50
