"""Hypothesis-generated requests to every endpoint: no 5xx, every rejection a JSON 4xx."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.fuzz import run_fuzz
from tests.reliability_harness.sidecar_process import Launch

from .conftest import no_violations

pytestmark = pytest.mark.timeout(120)


class TestFuzz:
    def test_generated_requests(self, tmp_path: Path, launch: Launch) -> None:
        result = run_fuzz(300, tmp_path, launch=launch)
        no_violations(result.violations)
        assert result.requests + result.not_sendable == 300
        assert {400, 413, 422}.issubset(result.by_status), result.by_status
