"""Fixtures shared by the whole suite: where the conformance vectors live."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
SHARED_DIR = Path(os.environ.get("ROLLOUT_SIDECAR_SHARED", REPO_ROOT.parent / "shared"))
SPEC_EXAMPLES = SHARED_DIR / "spec" / "examples"


@pytest.fixture(scope="session")
def spec_examples() -> Path:
    """The conformance vectors (``shared/spec/examples``), read at test time, never copied."""
    if not SPEC_EXAMPLES.is_dir():
        pytest.fail(f"conformance vectors not found at {SPEC_EXAMPLES}; set ROLLOUT_SIDECAR_SHARED")
    return SPEC_EXAMPLES
