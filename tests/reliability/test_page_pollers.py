"""Ten run pages polling while /drain_margin is polled: every answer 200, every poll served.

The latency promise (p99 under 5 ms) is a benchmark figure: ``python -m tests.reliability_harness
--only page-pollers``; here only correctness is asserted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.page_pollers import run_page_pollers
from tests.reliability_harness.sidecar_process import Launch

from .conftest import no_violations

pytestmark = pytest.mark.timeout(300)


class TestPagePollers:
    def test_open_pages_answer_while_drain_margin_is_polled(self, tmp_path: Path, launch: Launch) -> None:
        result = run_page_pollers(tmp_path, launch=launch, num_tasks=1500, seconds=4.0, p99_bound_ms=0)
        no_violations(result.violations)
        assert result.polls >= 10 * 2 * 2 and result.trickled > 5
        assert len(result.loaded_ms) > 50
