"""Fixtures shared by the whole suite: where the conformance vectors live."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.vectors import SPEC_EXAMPLES


@pytest.fixture(scope="session")
def spec_examples() -> Path:
    """The conformance vectors (``tests/fixtures/spec_examples``), read in place."""
    return SPEC_EXAMPLES
