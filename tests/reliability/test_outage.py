"""The sidecar SIGKILLed for a few seconds mid-run: the dispatcher does not notice."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.outage import run_outage
from tests.reliability_harness.sidecar_process import Launch

from .conftest import no_violations

pytestmark = pytest.mark.timeout(120)


class TestOutage:
    def test_five_second_outage(self, tmp_path: Path, launch: Launch) -> None:
        result = run_outage(5.0, tmp_path, run_s=10.0, num_tasks=80, launch=launch)
        no_violations(result.violations)
        assert result.events_during_outage > 0 and result.stats["dropped"] == 0
        assert max(result.call_ms_down) < result.bound_s * 1000 + 100  # the bound plus scheduling
