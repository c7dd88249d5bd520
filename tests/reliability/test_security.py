"""Token on every mutating route, no public bind without a token, canary never leaves."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.security import CANARY, plant_canary, run_security_checks
from tests.reliability_harness.sidecar_process import Launch

from .conftest import no_violations

pytestmark = pytest.mark.timeout(120)


class TestSecurity:
    def test_auth_binds_and_canary(self, tmp_path: Path, launch: Launch) -> None:
        result = run_security_checks(tmp_path, launch=launch)
        no_violations(result.violations)
        assert "POST /v1/runs/{run_id}/events" in result.mutating_routes
        assert result.unauthorized_401 == 8 * len(result.mutating_routes)
        assert result.public_binds_refused == 4
        assert result.canary_strings > 100 and result.log_bytes_scanned > 0

    def test_plant_canary_reaches_nested_text(self) -> None:
        row = {"a": [{"content": "hi", "type": "message"}], "output": "x", "id": "keep"}
        planted = plant_canary(row)
        assert planted["a"][0]["content"].endswith(CANARY) and planted["output"].endswith(CANARY)
        assert planted["id"] == "keep" and planted["a"][0]["type"] == "message"
