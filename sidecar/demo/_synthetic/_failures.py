"""Failure-sidecar rows and drained results, shaped as the collector writes or drops them."""

from __future__ import annotations

import random
from typing import Any, Final

from ._config import SyntheticConfig
from ._text import text

__all__ = ["drained_row", "failure_row"]

JSON = dict[str, Any]

_REQUEST_ERRORS: Final = (
    ("ServerDisconnectedError", "Server disconnected", None),
    ("TimeoutError", "", None),
    ("ClientResponseError", "503, message='Service Unavailable', url='http://agent:8000/run'", 503),
    ("ClientResponseError", "429, message='Too Many Requests', url='http://agent:8000/run'", 429),
    ("ClientResponseError", "502, message='Bad Gateway', url='http://agent:8000/run'", 502),
)


def _stamp(row: JSON, config: SyntheticConfig, identity: tuple[int, int, int]) -> JSON:
    """Add the keys the collector stamps on every finished result (identity and attempt keys)."""
    task_index, rollout_index, attempt_index = identity
    row["_ng_task_index"] = task_index
    row["_ng_rollout_index"] = rollout_index
    row["agent_ref"] = {"name": config.agent_name}
    if attempt_index > 0:
        row["_ng_attempt_index"] = attempt_index
    return row


def _gym_built(rng: random.Random, run_error: bool) -> JSON:
    """A row Gym builds when ``/run`` raised (``agent_request_failed`` / ``agent_run_error``)."""
    if run_error:
        body = "Internal Server Error\n" + text(rng, rng.randint(200, 2400))
        if len(body) > 2000:
            body = body[:2000] + "…"
        return {
            "_ng_failure_class": "agent_run_error",
            "_ng_failure_type": "ClientResponseError",
            "_ng_failure_message": "500, message='Internal Server Error', url='http://agent:8000/run'",
            "_ng_failure_http_status": 500,
            "_ng_failure_response_body": body,
        }
    failure_type, message, status = rng.choice(_REQUEST_ERRORS)
    return {
        "_ng_failure_class": "agent_request_failed",
        "_ng_failure_type": failure_type,
        "_ng_failure_message": message,
        "_ng_failure_http_status": status,
        "_ng_failure_response_body": None if status is None else "upstream unavailable",
    }


def failure_row(
    rng: random.Random,
    config: SyntheticConfig,
    identity: tuple[int, int, int],
    elapsed_seconds: float,
    terminal: bool,
) -> JSON:
    """One ``<name>_failures.jsonl`` row; ``terminal`` rows carry ``_ng_failure_terminal: true``."""
    roll = rng.random()
    row: JSON
    if not terminal and roll < 0.5:
        row = _gym_built(rng, run_error=roll < 0.15)
    elif roll < 0.75:
        row = {
            "reward": 0.0,
            "failure_reason": f"rollout exceeded its {round(elapsed_seconds)}s timeout",
            "elapsed_seconds": round(elapsed_seconds, 3),
            "_ng_failure_class": "timeout_exceeded",
            "_ng_failure_terminal": terminal,
        }
    else:
        row = {
            "_ng_task_id": f"task-{identity[0]}",
            "_ng_failure_class": "environment_server_failed",
            "_ng_failure_message": rng.choice(
                ("sandbox failed to start", "verifier crashed", "reference solution missing")
            ),
            "_ng_failure_stage": rng.choice(("setup", "verify")),
            "_ng_failure_terminal": terminal,
            "elapsed_seconds": round(elapsed_seconds, 3),
        }
    return _stamp(row, config, identity)


def drained_row(
    config: SyntheticConfig, identity: tuple[int, int, int], remaining: float, margin: float | None
) -> JSON:
    """The result Gym builds for a row the dispatch budget never started, stamped."""
    if margin is None:
        message = "not dispatched: dispatch budget exhausted"
    else:
        message = (
            f"not dispatched: {remaining:.0f}s left in dispatch budget, below the {margin:.0f}s drain margin"
        )
    row: JSON = {
        "_ng_failure_class": "cancelled",
        "_ng_no_persist": True,
        "_ng_dispatch_drained": True,
        "error_message": message,
    }
    return _stamp(row, config, identity)
