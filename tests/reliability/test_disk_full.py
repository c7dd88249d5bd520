"""Disk full and read-only journal mid-run: 503, nothing acked unstored, reads answer, recovery."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.diskfull import run_disk_full_trials

from .conftest import no_violations

pytestmark = pytest.mark.timeout(120)


class TestDiskFull:
    def test_full_and_read_only_then_recover(self, tmp_path: Path) -> None:
        result = run_disk_full_trials(1, tmp_path)
        no_violations(result.violations)
        assert result.trials == 2 and result.rejected_503 >= 2 and result.reads_while_faulted > 0
        assert any("disk full" in message for message in result.messages), result.messages
        assert any("read-only" in message for message in result.messages), result.messages
