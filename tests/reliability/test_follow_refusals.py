"""The follower never drops a line: long lines go raw, refusals and outages stop it, checkpoint kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability_harness.follow_refusals import padded_line, run_follow_refusals
from tests.reliability_harness.sidecar_process import Launch

from .conftest import no_violations

pytestmark = pytest.mark.timeout(300)


class TestFollowRefusals:
    def test_long_lines_refusals_and_an_unreachable_sidecar(self, tmp_path: Path, launch: Launch) -> None:
        result = run_follow_refusals(tmp_path, launch=launch, line_bytes=3 << 20, body_cap=4 << 20)
        no_violations(result.violations)
        assert result.long_records == 4 and result.token_rerun_records == 6
        assert result.over_cap_exit == 0 and "record_unreadable" in result.over_cap_message
        assert result.over_cap_records == 4
        assert result.wrong_token_exit == 1 and "token" in result.wrong_token_message
        assert result.unreachable_exit == 1 and result.unreachable_first_stderr_s is not None

    def test_padded_line_doubles_when_escaped(self) -> None:
        import orjson

        line = padded_line(b'{"a":1}\n', 1000)
        assert len(line) == 1000 or len(line) == 999
        assert orjson.loads(line)["a"] == 1
        assert len(orjson.dumps(line.decode())) > 1.9 * len(line)
