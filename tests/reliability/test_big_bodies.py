"""Concurrent bodies near the body cap are all accepted, and the service's memory is measured.

The memory figures are benchmark figures (``python -m tests.reliability_harness --only
big-bodies``); here every body must be answered 200 and the peak must show the bodies arrived.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.big_bodies import run_big_bodies
from tests.reliability_harness.sidecar_process import Launch

from .conftest import no_violations

pytestmark = pytest.mark.timeout(300)


class TestBigBodies:
    def test_concurrent_bodies_near_the_cap_are_accepted(self, tmp_path: Path, launch: Launch) -> None:
        result = run_big_bodies(tmp_path, launch=launch, body_cap=8 << 20, concurrent=3, rounds=1)
        no_violations(result.violations)
        assert result.answers.count(200) == 6  # the warm-up round and the near-cap round
        assert result.body_bytes > (7 << 20)
        assert result.peak_growth_bytes > result.body_bytes  # the bodies were held, and measured
