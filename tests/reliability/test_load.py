"""Concurrent clients on loopback: zero lost, zero duplicated, every report equal to the batch."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.load import run_load
from tests.reliability_harness.sidecar_process import Launch

from .conftest import no_violations

pytestmark = pytest.mark.timeout(120)


class TestLoad:
    def test_sixteen_clients(self, tmp_path: Path, launch: Launch) -> None:
        result = run_load(1600, tmp_path, clients=16, batch=8, launch=launch)
        no_violations(result.violations)
        assert result.events >= 1600 and result.lost == 0 and result.duplicated == 0
        assert result.reports_checked == 16 and len(result.latencies_ms) == result.requests
