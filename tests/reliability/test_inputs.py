"""Client-named materialized-inputs files: one refusal for every hostile path, bounded memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.inputs import run_inputs
from tests.reliability_harness.sidecar_process import Launch

from .conftest import no_violations

pytestmark = pytest.mark.timeout(180)


class TestClientNamedFiles:
    def test_hostile_paths_refused_alike_and_big_lines_bounded(self, tmp_path: Path, launch: Launch) -> None:
        result = run_inputs(tmp_path, launch=launch, big_line_bytes=48 << 20, readers=6, line_cap="4M")
        no_violations(result.violations)
        assert result.refused == 10 + 11  # the outside-the-root file is refused only when confined
        assert result.distinct_refusal_bodies == 1
        assert result.accepted_plans == 2 and result.big_reads == 6
