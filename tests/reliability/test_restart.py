"""Bind first: /healthz at once, /readyz 503 with progress while the journal replays; clear startup errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.restart import run_restart
from tests.reliability_harness.sidecar_process import Launch

from .conftest import no_violations

pytestmark = pytest.mark.timeout(300)


class TestRestart:
    def test_serves_while_replaying_and_refuses_bad_starts_in_one_line(
        self, tmp_path: Path, launch: Launch
    ) -> None:
        result = run_restart(tmp_path, launch=launch, num_tasks=3000)
        no_violations(result.violations)
        assert result.healthz_s is not None and result.ready_s is not None
        assert result.healthz_s < result.ready_s and result.progress_polls >= 2
        assert "already in use" in result.startup_errors["busy port"]
        assert "--port" in result.startup_errors["busy port"]
        assert "/proc/nope" in result.startup_errors["journal under /proc"]
