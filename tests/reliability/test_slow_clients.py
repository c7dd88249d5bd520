"""Slowloris from loopback: half headers and stalled bodies are closed, /drain_margin keeps answering."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.sidecar_process import Launch
from tests.reliability_harness.slow_clients import run_slow_clients

from .conftest import no_violations

pytestmark = pytest.mark.timeout(120)


class TestSlowClients:
    def test_slow_sockets_closed_and_drain_margin_answers(self, tmp_path: Path, launch: Launch) -> None:
        result = run_slow_clients(tmp_path, launch=launch, attackers=300, stallers=50, max_per_peer=128)
        no_violations(result.violations)
        assert result.closed_by_service == 350 and result.slowest_close_s < 3.5
        assert result.polls_ok == result.polls > 10
