"""The fast part of the reliability suite: each scenario of ``tests.reliability_harness`` at CI size.

Full sizes (and the figures of ``docs/reliability.md``): ``python -m tests.reliability_harness``.
Services run as child processes on 127.0.0.1; CI forks them from this interpreter
(``launch="fork"``, same ``rollout-sidecar`` entry point, no per-restart import cost).
"""

from __future__ import annotations

import pytest

from tests.reliability_harness.sidecar_process import Launch


@pytest.fixture
def launch() -> Launch:
    return "fork"


def no_violations(violations: list[str]) -> None:
    """Assert with every violation in the message (the scenarios collect rather than stop)."""
    assert not violations, "\n".join(violations[:20])
