"""The dispatcher's drain decision and the result row it builds for a row it never starts.

Pure functions of the seconds left in the dispatch budget and the tracker's drain margin, so the
sidecar (``GET /drain_margin``) and a dispatcher decide, and word, a drain the same way.
"""

from __future__ import annotations

from typing import Any

__all__ = ["DRAINED_FAILURE_CLASS", "drained_result", "should_drain"]

DRAINED_FAILURE_CLASS = "cancelled"
"""``_ng_failure_class`` of a drained row."""


def should_drain(remaining_s: float, margin_s: float | None) -> bool:
    """Whether a row about to start should be drained instead.

    ``remaining_s`` is the budget left now (deadline minus monotonic now), ``margin_s`` the
    tracker's ``drain_margin(configured)``. Drains when the budget is spent or strictly less than
    the margin is left: ``remaining_s == margin_s`` is still dispatched.
    """
    return remaining_s <= 0 or (margin_s is not None and remaining_s < margin_s)


def drained_result(remaining_s: float, margin_s: float | None) -> dict[str, Any]:
    """The result Gym completes a drained row with: four keys, written to no file.

    The margin wording is used whenever a margin exists, even when the trigger was a spent
    budget, so ``-0s left`` and equal-looking numbers (``40s left ... below the 40s``) occur.
    """
    if margin_s is not None:
        message = (
            f"not dispatched: {remaining_s:.0f}s left in dispatch budget, "
            f"below the {margin_s:.0f}s drain margin"
        )
    else:
        message = "not dispatched: dispatch budget exhausted"
    return {
        "_ng_failure_class": DRAINED_FAILURE_CLASS,
        "_ng_no_persist": True,
        "_ng_dispatch_drained": True,
        "error_message": message,
    }
