"""Normalization of user-supplied ignored check IDs (trimmed, validated, deduplicated in order):
one rule and one message for the reducer, the API and the CLI.
"""

from __future__ import annotations

from collections.abc import Iterable

from .registry import CHECK_IDS

__all__ = ["normalize_ignored_checks"]

_KNOWN = frozenset(CHECK_IDS)


def normalize_ignored_checks(checks: str | Iterable[str] | None) -> tuple[str, ...]:
    """Strip, drop empties, de-duplicate (first occurrence wins) and validate check IDs.

    A string is split on ``,``; any other iterable is taken element by element, so
    ``["a,b"]`` is one (unknown) ID, exactly as NeMo Gym does.
    """
    if checks is None:
        return ()
    items: Iterable[str] = checks.split(",") if isinstance(checks, str) else checks
    seen: dict[str, None] = {}
    for item in items:
        stripped = str(item).strip()
        if stripped:
            seen.setdefault(stripped, None)
    unknown = [check for check in seen if check not in _KNOWN]
    if unknown:
        raise ValueError("Unknown rollout health check(s): " + ", ".join(sorted(unknown)))
    return tuple(seen)
