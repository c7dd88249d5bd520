"""The in-repo conformance vectors against a shared checkout, when one is beside the repository."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REFRESH = Path(__file__).resolve().parent / "fixtures" / "refresh.py"


def _check(*extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REFRESH), "--check", *extra], capture_output=True, text=True, check=False
    )


def test_fixtures_match_the_shared_spec_when_present() -> None:
    result = _check()
    if result.returncode == 2:  # no shared checkout: it is optional
        pytest.skip(result.stderr.strip())
    assert result.returncode == 0, f"fixtures drifted; run {REFRESH}:\n{result.stdout}{result.stderr}"


def test_check_names_a_drifted_file(tmp_path: Path) -> None:
    examples = tmp_path / "spec" / "examples"
    shutil.copytree(REFRESH.parent / "spec_examples", examples)
    changed = examples / "health" / "01_healthy" / "args.json"
    changed.chmod(0o644)
    changed.write_text("{}")
    result = _check("--shared", str(tmp_path))
    assert (result.returncode, result.stdout) == (1, "differs: health/01_healthy/args.json\n")


def test_a_missing_shared_checkout_is_a_clear_error(tmp_path: Path) -> None:
    result = _check("--shared", str(tmp_path / "nope"))
    assert result.returncode == 2
    assert "pass --shared DIR or set ROLLOUT_SIDECAR_SHARED" in result.stderr
