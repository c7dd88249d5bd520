"""Where the conformance vectors live: in the repository, so that the suite runs in a lone clone."""

from __future__ import annotations

from pathlib import Path

SPEC_EXAMPLES = Path(__file__).resolve().parent / "fixtures" / "spec_examples"
"""Facts about NeMo Gym 0.7.0's behaviour; ``tests/fixtures/refresh.py`` updates them."""


def health_example_names() -> list[str]:
    """The folder names of the health-check vectors; usable at collection, before fixtures exist."""
    return sorted(path.name for path in (SPEC_EXAMPLES / "health").iterdir() if path.is_dir())
