"""Per-rollout ``ng_perf``: turns, tool calls, token sums and how many turns resolved to a captured call.

Derived only from the row's final ``ng_trajectory`` (validated against the shared contract) plus
the dispatcher's measured latency. Tokens are summed over the model calls the invocations own:
each ``ModelCallRef`` resolves to at most one captured call, and a call counts once, for the first
invocation that reached it. Unmatched or ambiguous refs lose their tokens silently;
``token_observability_coverage`` is the only signal that this happened.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, MutableMapping
from typing import Any

from health.contract import ModelCallRef, TrajectoryModelCall, TrajectoryRecord, validate_trajectory

__all__ = ["NG_PERF_KEY", "NG_TRAJECTORY_KEY", "attach_ng_perf", "build_ng_perf", "ng_perf_for_trajectory"]

NG_PERF_KEY = "ng_perf"
"""Result key that holds the per-rollout summary."""
NG_TRAJECTORY_KEY = "ng_trajectory"
"""Result key of the canonical trajectory, the only input of ``ng_perf``."""

_TOKEN_FIELDS = (
    ("prompt_tokens", "prompt_tokens"),
    ("cached_prompt_tokens", "cached_tokens"),
    ("completion_tokens", "completion_tokens"),
    ("reasoning_tokens", "reasoning_tokens"),
)
"""``ng_perf`` key and the ``token_stats`` field it sums, in output order (``total_tokens`` is unused)."""

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
    if not isinstance(raw, dict):
        return None
    record = validate_trajectory(raw)
    if record is None:
        return None
    return ng_perf_for_trajectory(record, rollout_latency_ms)


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
    has the same fields with the same values. One pass resolves the references and claims the
    calls; the ``(type, name, response_id)`` index is built only for a reference without a
    ``model_call_id``.
    """
    invocations = record.invocations
    if not invocations:
        return None
    calls = record.model_calls
    by_id: dict[str, int] = {}
    for position, call in enumerate(calls):
        call_id = call.model_call_id
        if call_id and call_id not in by_id:
            by_id[call_id] = position
    index = _CallIndex(calls, by_id)
    claimed: set[int] = set()
    owned: list[TrajectoryModelCall] = []
    turns_per_invocation: dict[str, int] = {invocation.invocation_id: 0 for invocation in invocations}
    for turn in record.turns:
        invocation_id = turn.invocation_id
        if invocation_id in turns_per_invocation:
            turns_per_invocation[invocation_id] += 1
    num_turns = 0
    for invocation in invocations:
        count = 0
        for ref in invocation.model_calls:
            found = index.resolve(ref)
            if found is not None and found not in claimed:
                claimed.add(found)
                owned.append(calls[found])
                count += 1
        num_turns += turns_per_invocation[invocation.invocation_id] or count or 1
    num_tool_calls = 0
    for tool_call in record.tool_calls:
        if tool_call.invocation_id in turns_per_invocation:
            num_tool_calls += 1

    perf: dict[str, Any] = {
        "num_turns": num_turns,
        "num_tool_calls": num_tool_calls,
        "token_observability_coverage": min(1.0, len(owned) / num_turns),
    }
    perf.update(_token_sums(owned))
    if isinstance(rollout_latency_ms, int | float):
        perf["total_latency_ms"] = rollout_latency_ms
    return perf


def _token_sums(owned: list[TrajectoryModelCall]) -> dict[str, int]:
    """Each ``ng_perf`` token key with the sum of its reported values, in output order; a key no
    owned call reports is left out."""
    prompt: int | None = None
    cached: int | None = None
    completion: int | None = None
    reasoning: int | None = None
    for call in owned:  # summed from 0 in order, exactly as ``sum`` does
        stats = call.token_stats
        if stats.prompt_tokens is not None:
            prompt = (0 if prompt is None else prompt) + stats.prompt_tokens
        if stats.cached_tokens is not None:
            cached = (0 if cached is None else cached) + stats.cached_tokens
        if stats.completion_tokens is not None:
            completion = (0 if completion is None else completion) + stats.completion_tokens
        if stats.reasoning_tokens is not None:
            reasoning = (0 if reasoning is None else reasoning) + stats.reasoning_tokens
    sums = (prompt, cached, completion, reasoning)
    return {key: total for (key, _), total in zip(_TOKEN_FIELDS, sums, strict=True) if total is not None}


class _CallIndex:
    """Positions of a record's model calls by ``model_call_id`` (the first call naming it) and,
    built on first use, by ``(type, name, response_id)``."""

    __slots__ = ("_by_id", "_by_pair", "_calls")

    def __init__(self, calls: list[TrajectoryModelCall], by_id: dict[str, int]) -> None:
        self._calls = calls
        self._by_id = by_id
        self._by_pair: dict[tuple[str, str, str], list[int]] | None = None

    def _pairs(self) -> dict[tuple[str, str, str], list[int]]:
        by_pair: dict[tuple[str, str, str], list[int]] = {}
        for position, call in enumerate(self._calls):
            metadata = call.response_metadata
            if metadata.model_ref is not None and metadata.response_id:
                key = (metadata.model_ref.type, metadata.model_ref.name, metadata.response_id)
                by_pair.setdefault(key, []).append(position)
        self._by_pair = by_pair
        return by_pair

    def resolve(self, ref: ModelCallRef) -> int | None:
        """The one call position ``ref`` names, or ``None`` when unmatched or ambiguous.

        A ref with a ``model_call_id`` is matched by id only; its ``model_ref`` and
        ``response_id`` (an empty string counts as given) can only reject that match, never
        fall back to the pair index.
        """
        if ref.model_call_id:
            position = self._by_id.get(ref.model_call_id)
            if position is None:
                return None
            metadata = self._calls[position].response_metadata
            if ref.model_ref is not None and (
                metadata.model_ref is None
                or metadata.model_ref.type != ref.model_ref.type
                or metadata.model_ref.name != ref.model_ref.name
            ):
                return None
            if ref.response_id is not None and ref.response_id != metadata.response_id:
                return None
            return position
        if ref.model_ref is not None and ref.response_id:
            by_pair = self._by_pair if self._by_pair is not None else self._pairs()
            candidates = by_pair.get((ref.model_ref.type, ref.model_ref.name, ref.response_id), ())
            if len(candidates) == 1:
                return candidates[0]
        return None
