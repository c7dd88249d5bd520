"""Fixtures shared by the whole suite: where the conformance vectors live, and a clean root logger."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from tests.vectors import SPEC_EXAMPLES

# Hypothesis's per-example deadline is a timed assert: on a shared, loaded machine it fails
# tests whose behaviour is right. Performance lives in benchmarks/, so the suite runs without it.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")


@pytest.fixture(scope="session")
def spec_examples() -> Path:
    """The conformance vectors (``tests/fixtures/spec_examples``), read in place."""
    return SPEC_EXAMPLES


@pytest.fixture(autouse=True)
def _drop_root_log_handlers_a_test_added() -> Iterator[None]:
    """``serve`` configures logging onto the stderr of its moment; in-process CLI tests would leave
    that handler writing to a closed capture stream in later tests. pytest's own handlers stay."""
    root = logging.getLogger()
    before = set(root.handlers)
    level = root.level
    yield
    for handler in list(root.handlers):
        if handler not in before and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
    root.setLevel(level)
