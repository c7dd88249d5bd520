"""Per-rollout ``ng_perf``: turns, tool calls, token sums and how many turns resolved to a captured call.

Derived only from the row's final ``ng_trajectory`` (validated against the shared contract) plus
the dispatcher's measured latency. Tokens are summed over the model calls the invocations own:
each ``ModelCallRef`` resolves to at most one captured call, and a call counts once, for the first
invocation that reached it. Unmatched or ambiguous refs lose their tokens silently;
``token_observability_coverage`` is the only signal that this happened.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, MutableMapping
from typing import Any

from health.contract import ModelCallRef, TrajectoryModelCall, TrajectoryRecord, validate_trajectory

__all__ = ["NG_PERF_KEY", "NG_TRAJECTORY_KEY", "attach_ng_perf", "build_ng_perf", "ng_perf_for_trajectory"]

NG_PERF_KEY = "ng_perf"  # the result key of the per-rollout summary
NG_TRAJECTORY_KEY = "ng_trajectory"  # the canonical trajectory, the only input of ``ng_perf``

_log = logging.getLogger(__name__)


def build_ng_perf(
    result: Mapping[str, Any], rollout_latency_ms: float | None = None
) -> dict[str, Any] | None:
    """The ``ng_perf`` object for one result row, or ``None`` when it must stay absent.

    Absent when ``ng_trajectory`` is missing or not a JSON object, fails ``TrajectoryRecord``
    validation, or has no invocations. ``rollout_latency_ms`` becomes ``total_latency_ms`` as
    given when it is an ``int`` or ``float``.
    """
    raw = result.get(NG_TRAJECTORY_KEY)
    record = validate_trajectory(raw) if isinstance(raw, dict) else None
    return None if record is None else ng_perf_for_trajectory(record, rollout_latency_ms)


def attach_ng_perf(
    result: MutableMapping[str, Any],
    observability_enabled: bool,
    rollout_latency_ms: float | None = None,
) -> None:
    """Set ``result["ng_perf"]`` when observability is on and an object can be built.

    Otherwise ``result`` is left untouched, including a ``ng_perf`` it already carries. A perf
    side-channel must never abort collection, so a builder error is logged, not raised.
    """
    if not observability_enabled:
        return
    try:
        perf = build_ng_perf(result, rollout_latency_ms)
    except Exception:  # the row must survive whatever the trajectory holds
        _log.warning("ng_perf could not be built; leaving the row without it", exc_info=True)
        return
    if perf is not None:
        result[NG_PERF_KEY] = perf


def ng_perf_for_trajectory(
    record: TrajectoryRecord, rollout_latency_ms: float | None = None
) -> dict[str, Any] | None:
    """``build_ng_perf`` for a trajectory that is already validated (saves a second validation).

    Also takes the batch fast path's strict mirror of the record (``health.strict_schema``), which
    has the same fields with the same values.
    """
    invocations = record.invocations
    if not invocations:
        return None
    calls = record.model_calls
    by_id: dict[str, int] = {}
    by_pair: dict[tuple[str, str, str], list[int]] = {}
    for position, call in enumerate(calls):
        if call.model_call_id:
            by_id.setdefault(call.model_call_id, position)
        metadata = call.response_metadata
        if metadata.model_ref is not None and metadata.response_id:
            pair = (metadata.model_ref.type, metadata.model_ref.name, metadata.response_id)
            by_pair.setdefault(pair, []).append(position)
    turns = Counter(turn.invocation_id for turn in record.turns)
    owned: dict[int, TrajectoryModelCall] = {}  # by position, in the order the invocations claim them
    num_turns = 0
    for invocation in invocations:
        count = 0
        for ref in invocation.model_calls:
            found = _resolve(ref, calls, by_id, by_pair)
            if found is not None and found not in owned:
                owned[found] = calls[found]
                count += 1
        num_turns += turns[invocation.invocation_id] or count or 1
    invocation_ids = {invocation.invocation_id for invocation in invocations}
    perf: dict[str, Any] = {
        "num_turns": num_turns,
        "num_tool_calls": sum(1 for call in record.tool_calls if call.invocation_id in invocation_ids),
        "token_observability_coverage": min(1.0, len(owned) / num_turns),
    }
    stats = [call.token_stats for call in owned.values()]
    columns = {
        "prompt_tokens": [each.prompt_tokens for each in stats],
        "cached_prompt_tokens": [each.cached_tokens for each in stats],
        "completion_tokens": [each.completion_tokens for each in stats],
        "reasoning_tokens": [each.reasoning_tokens for each in stats],  # ``total_tokens`` is unused
    }
    for key, column in columns.items():
        reported = [value for value in column if value is not None]
        if reported:  # a key no owned call reports is left out
            perf[key] = sum(reported)
    if isinstance(rollout_latency_ms, int | float):
        perf["total_latency_ms"] = rollout_latency_ms
    return perf


def _resolve(
    ref: ModelCallRef,
    calls: list[TrajectoryModelCall],
    by_id: dict[str, int],
    by_pair: dict[tuple[str, str, str], list[int]],
) -> int | None:
    """The one call position ``ref`` names, or ``None`` when unmatched or ambiguous.

    A ref with a ``model_call_id`` is matched by id only; its ``model_ref`` and ``response_id``
    (an empty string counts as given) can only reject that match, never fall back to the pair.
    """
    if ref.model_call_id:
        position = by_id.get(ref.model_call_id)
        if position is None:
            return None
        metadata = calls[position].response_metadata
        if ref.model_ref is not None and (
            metadata.model_ref is None
            or (metadata.model_ref.type, metadata.model_ref.name) != (ref.model_ref.type, ref.model_ref.name)
        ):
            return None
        if ref.response_id is not None and ref.response_id != metadata.response_id:
            return None
        return position
    if ref.model_ref is not None and ref.response_id:
        candidates = by_pair.get((ref.model_ref.type, ref.model_ref.name, ref.response_id), [])
        if len(candidates) == 1:
            return candidates[0]
    return None
