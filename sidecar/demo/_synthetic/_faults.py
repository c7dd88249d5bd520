"""Field-level fault injection on a laid-out rollout or an assembled row.

Shape-changing faults (extra attempts, hollow turns, a failed last call) are laid out by
``_rollout``; the ones here edit a healthy rollout so that exactly the intended check fires.
"""

from __future__ import annotations

import random
from typing import Any, Final

from ._rollout import BuiltRollout
from ._text import hex_id

__all__ = ["apply_row_fault", "apply_trajectory_fault"]

JSON = dict[str, Any]

_UNOBSERVING_GAPS: Final = (
    "turns_unavailable",
    "turn_model_call_scope_incomplete",
    "model_calls_unavailable",
    "model_call_capture_incomplete",
    "model_call_capture_records_unreadable",
    "trajectory_projection_failed",
)


def _successful_calls(built: BuiltRollout) -> list[JSON]:
    return [c for c in built.model_calls if c["response_metadata"]["status_code"] == 200]


def _missing_token_counts(built: BuiltRollout, rng: random.Random) -> None:
    stats = rng.choice(_successful_calls(built))["token_stats"]
    missing = rng.choice((("prompt_tokens",), ("completion_tokens",), ("prompt_tokens", "completion_tokens")))
    for name in missing:
        stats[name] = None
    stats["total_tokens"] = None


def _capture_mismatch(built: BuiltRollout, rng: random.Random) -> None:
    """A referenced call missing from the capture, captured twice, or a contradiction gap."""
    variant = rng.randrange(3)
    if variant == 0:
        built.model_calls.remove(rng.choice(built.model_calls))
        return
    call = rng.choice(_successful_calls(built))
    if variant == 1:
        call_id = call["model_call_id"]
        for container in (*built.turns, *built.invocations):
            for ref in container["model_calls"]:
                if ref["model_call_id"] == call_id:
                    ref["model_call_id"] = None
        duplicate = {**call, "model_call_id": hex_id(rng)}
        built.model_calls.insert(built.model_calls.index(call) + 1, duplicate)
        return
    built.gaps.append(
        {
            "code": "model_call_reference_conflict",
            "invocation_id": "main",
            "detail": f"call:{call['model_call_id']}",
        }
    )


def _malformed_response(built: BuiltRollout, rng: random.Random) -> None:
    """A gateway that flattened a length-limited chat message to a string."""
    call = rng.choice(_successful_calls(built))
    call["response_metadata"]["finish_reason"] = "length"
    response = call["response"]
    call["response"] = {
        "id": call["response_metadata"]["response_id"],
        "object": "chat.completion",
        "model": response.get("model"),
        "choices": [{"index": 0, "finish_reason": "length", "message": "[truncated]"}],
    }


def _observation_gap(built: BuiltRollout, rng: random.Random) -> None:
    """A projection that admits a gap; a third are harnesses that capture calls only."""
    if rng.random() < 1 / 3:  # the shape of real rows from harnesses without turn capture
        built.invocations.clear()
        built.turns.clear()
        built.tool_calls.clear()
        for code in ("turns_unavailable", "conversation_unavailable"):
            built.gaps.append({"code": code, "invocation_id": None, "detail": None})
        return
    built.gaps.append({"code": rng.choice(_UNOBSERVING_GAPS), "invocation_id": None, "detail": None})


def apply_trajectory_fault(built: BuiltRollout, fault: str | None, rng: random.Random) -> None:
    """Edit the laid-out trajectory for the faults that live in ``ng_trajectory``."""
    if fault == "missing_turns":
        built.turns.clear()
    elif fault == "malformed_response":
        _malformed_response(built, rng)
    elif fault == "missing_token_counts":
        _missing_token_counts(built, rng)
    elif fault == "capture_mismatch":
        _capture_mismatch(built, rng)
    elif fault == "observation_gap":
        _observation_gap(built, rng)


def _invalidate(trajectory: JSON, rng: random.Random) -> None:
    """Schema drift that ``TrajectoryRecord`` rejects: an unknown key, a bad enum or a negative value."""
    call = rng.choice(trajectory["model_calls"])
    variant = rng.randrange(3)
    if variant == 0:
        call["token_stats"]["audio_tokens"] = 0
    elif variant == 1:
        call["response_metadata"]["model_ref"] = {"type": "openai_models", "name": "policy_model"}
    else:
        call["duration_ms"] = -call["duration_ms"] - 1.0


def apply_row_fault(row: JSON, fault: str | None, rng: random.Random) -> None:
    """Edit the assembled row for the faults that live outside (or replace) ``ng_trajectory``."""
    if fault == "token_count_mismatch":
        usage = row["response"]["usage"]
        side = rng.choice(("input_tokens", "output_tokens"))
        usage[side] += rng.randint(1, 2000)
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    elif fault == "no_trajectory":
        del row["ng_trajectory"]
        row.pop("ng_model_call_capture", None)
    elif fault == "invalid_trajectory":
        _invalidate(row["ng_trajectory"], rng)
