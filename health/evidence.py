"""Derived evidence of one rollout: availability flags, the normalized call view and bindings.

Everything is computed from the *validated* trajectory model, reading the same values its
canonical dump would hold (pydantic's dump of a field is the validated attribute), so no
``model_dump`` round trip is needed. Free-form payloads (``request``/``response``) are
referenced, never copied.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from .contract import ModelCallRef, TrajectoryModelCall, TrajectoryRecord

__all__ = [
    "CAPTURE_GAP_CODES",
    "CONTRADICTION_GAP_KINDS",
    "Binding",
    "Call",
    "Evidence",
    "Gap",
    "Ref",
    "build_evidence",
    "call_identity",
    "is_failed",
    "is_successful",
    "transcript_usage",
]

CAPTURE_GAP_CODES: frozenset[str] = frozenset(
    {
        "model_calls_unavailable",
        "model_call_capture_incomplete",
        "model_call_capture_records_unreadable",
        "model_call_capture_unreadable",
    }
)
CONTRADICTION_GAP_KINDS: dict[str, str] = {
    "model_call_reference_unmatched": "missing_captured_call",
    "model_call_reference_ambiguous": "duplicated_captured_call",
    "model_call_reference_conflict": "conflicting_call_ownership",
}
_FAILED_RESPONSE_STATUSES = frozenset({"failed", "error", "cancelled"})

ModelRef = tuple[str, str]


@dataclass(slots=True)
class Call:
    """One ``model_calls[i]`` entry as the checks see it (spec §4.2)."""

    call_index: int
    started_at: float | None
    model_call_id: str | None
    response_id: str | None
    model_ref: ModelRef | None
    status_code: int | None
    response_status: str | None
    finish_reason: str | None
    error_category: str | None
    tokens_in: int | None
    tokens_out: int | None
    response: Any
    failed: bool
    """Spec §4.3: HTTP status >= 400, a truthy error category, or a failed response status."""
    successful: bool
    """Not failed, and no status or a 2xx/3xx one (a status below 200 is neither)."""


class Ref(NamedTuple):
    """A canonical model-call reference from a turn or an invocation, with its reference key."""

    key: str
    """``call:{model_call_id}``, or ``response:{type}:{name}:{response_id}`` (spec §4.5)."""
    model_call_id: str | None
    model_ref: ModelRef | None
    response_id: str | None


@dataclass(slots=True, frozen=True)
class Gap:
    code: str
    invocation_id: str | None
    detail: str | None


@dataclass(slots=True)
class Binding:
    """References resolved against the captured calls (spec §4.5)."""

    references: list[str] = field(default_factory=list)
    matched_calls: list[Call] = field(default_factory=list)
    missing_references: list[str] = field(default_factory=list)
    duplicated_references: list[tuple[str, int]] = field(default_factory=list)

    @property
    def observed(self) -> bool:
        return bool(self.references)

    @property
    def complete(self) -> bool:
        return bool(self.references) and not self.missing_references and not self.duplicated_references


@dataclass(slots=True)
class Evidence:
    """What the rollout checks may read; the flags gate them (spec §4.1, §6.4)."""

    trajectory_observed: bool
    turns_observed: bool
    turn_call_scope_complete: bool
    model_calls_observed: bool
    calls: list[Call]
    turn_binding: Binding
    owned_binding: Binding
    gaps: list[Gap]
    trajectory: TrajectoryRecord | None
    transcript_prompt: int | None
    transcript_completion: int | None
    turn_steps: list[tuple[int, bool, bool, bool]] | None = None
    """Memo of the turn analysis shared by the two turn checks (see ``health.checks``)."""

    @property
    def usage_present(self) -> bool:
        return self.transcript_prompt is not None and self.transcript_completion is not None

    @property
    def has_contradiction_gap(self) -> bool:
        return any(gap.code in CONTRADICTION_GAP_KINDS for gap in self.gaps)


def is_failed(status_code: int | None, error_category: str | None, response_status: str | None) -> bool:
    """Spec §4.3: HTTP status >= 400, a truthy error category, or a failed response status."""
    return (
        (status_code is not None and status_code >= 400)
        or bool(error_category)
        or response_status in _FAILED_RESPONSE_STATUSES
    )


def is_successful(status_code: int | None, error_category: str | None, response_status: str | None) -> bool:
    """Not failed, and no status or a 2xx/3xx one (a status below 200 is neither)."""
    return not is_failed(status_code, error_category, response_status) and (
        status_code is None or 200 <= status_code <= 399
    )


def call_identity(call: Call) -> str | None:
    """Replay identity (spec §4.6); plain concatenation, so colons can make ids collide."""
    if call.model_call_id:
        return f"call:{call.model_call_id}"
    if call.model_ref is not None and call.response_id:
        return f"response:{call.model_ref[0]}:{call.model_ref[1]}:{call.response_id}"
    if call.response_id:
        return f"response::{call.response_id}"
    return None


def _int_or_none(value: object) -> int | None:
    """A usage value counts only as a JSON integer >= 0 (booleans and floats do not)."""
    if type(value) is int and value >= 0:
        return value
    return None


def transcript_usage(record: dict[str, Any]) -> tuple[int | None, int | None]:
    """Top-level usage read from the raw record (spec §4.8); ``None`` marks a missing side."""
    response = record.get("response")
    if not isinstance(response, dict):
        return None, None
    usage = response.get("usage")
    if not isinstance(usage, dict):
        return None, None
    prompt = usage["input_tokens"] if "input_tokens" in usage else usage.get("prompt_tokens")
    completion = usage["output_tokens"] if "output_tokens" in usage else usage.get("completion_tokens")
    return _int_or_none(prompt), _int_or_none(completion)


def _normalize_call(index: int, call: TrajectoryModelCall) -> Call:
    metadata = call.response_metadata
    ref = metadata.model_ref
    stats = call.token_stats
    status_code = metadata.status_code
    error_category = metadata.error_category
    response_status = metadata.response_status
    failed = is_failed(status_code, error_category, response_status)
    return Call(
        index,
        call.started_at,
        call.model_call_id,
        metadata.response_id,
        None if ref is None else (ref.type, ref.name),
        status_code,
        response_status,
        metadata.finish_reason,
        error_category,
        stats.prompt_tokens,
        stats.completion_tokens,
        call.response,
        failed,
        not failed and (status_code is None or 200 <= status_code <= 399),
    )


def _dedupe(refs: Iterable[ModelCallRef], seen: set[tuple[str, str, str, str]], into: list[Ref]) -> None:
    """Append the canonical refs of ``refs`` whose signature is not in ``seen`` yet.

    The signature is (model_call_id, type, name, response_id) with ``None`` as ``""``, so
    ``response_id: null`` and ``""`` collapse to the first one written.
    """
    for ref in refs:
        call_id = ref.model_call_id
        response_id = ref.response_id
        model_ref = ref.model_ref
        if model_ref is None:
            pair = None
            signature = (call_id or "", "", "", response_id or "")
        else:
            pair = (model_ref.type, model_ref.name)
            signature = (call_id or "", pair[0], pair[1], response_id or "")
        if signature in seen:
            continue
        seen.add(signature)
        key = f"call:{call_id}" if call_id else f"response:{signature[1]}:{signature[2]}:{response_id}"
        into.append(Ref(key, call_id, pair, response_id))


class _CallIndex:
    """Captured calls indexed by the two join keys, so each reference resolves in O(1)."""

    __slots__ = ("by_id", "by_pair", "resolved")

    def __init__(self, calls: list[Call]) -> None:
        self.by_id: dict[str, list[Call]] = {}
        self.by_pair: dict[tuple[str, str, str], list[Call]] = {}
        self.resolved: dict[Ref, list[Call]] = {}
        for call in calls:
            if call.model_call_id:
                self.by_id.setdefault(call.model_call_id, []).append(call)
            if call.model_ref is not None and call.response_id:
                key = (call.model_ref[0], call.model_ref[1], call.response_id)
                self.by_pair.setdefault(key, []).append(call)

    def candidates(self, ref: Ref) -> list[Call]:
        found = self.resolved.get(ref)
        if found is not None:
            return found
        if ref.model_call_id:
            found = self.by_id.get(ref.model_call_id, [])
            if ref.model_ref is not None:
                found = [call for call in found if call.model_ref == ref.model_ref]
            if ref.response_id is not None:
                found = [call for call in found if call.response_id == ref.response_id]
        elif ref.model_ref is not None and ref.response_id:
            found = self.by_pair.get((ref.model_ref[0], ref.model_ref[1], ref.response_id), [])
        else:
            found = []
        self.resolved[ref] = found
        return found


def _bind(refs: list[Ref], index: _CallIndex, matched: dict[int, Call], binding: Binding) -> Binding:
    """Resolve ``refs`` into ``binding``; ``matched`` (by list position) carries over from a base view."""
    for ref in refs:
        key = ref.key
        binding.references.append(key)
        found = index.candidates(ref)
        if not found:
            binding.missing_references.append(key)
        elif len(found) > 1:
            binding.duplicated_references.append((key, len(found)))
        else:
            matched.setdefault(found[0].call_index, found[0])
    binding.matched_calls = [matched[position] for position in sorted(matched)]
    return binding


def build_evidence(trajectory: TrajectoryRecord | None, record: dict[str, Any]) -> Evidence:
    """Evidence for a validated trajectory (or ``None`` when absent or unreadable)."""
    prompt, completion = transcript_usage(record)
    gaps: list[Gap] = []
    codes: set[str] = set()
    if trajectory is not None:
        gaps = [Gap(gap.code, gap.invocation_id, gap.detail) for gap in trajectory.gaps]
        codes = {gap.code for gap in gaps}
    observed = trajectory is not None and "trajectory_projection_failed" not in codes
    calls: list[Call] = []
    turn_refs: list[Ref] = []
    invocation_refs: list[Ref] = []
    if observed and trajectory is not None:
        calls = [_normalize_call(position, call) for position, call in enumerate(trajectory.model_calls)]
        seen: set[tuple[str, str, str, str]] = set()
        for turn in trajectory.turns:
            _dedupe(turn.model_calls, seen, turn_refs)
        for invocation in trajectory.invocations:
            _dedupe(invocation.model_calls, seen, invocation_refs)
    index = _CallIndex(calls)
    turn_matched: dict[int, Call] = {}
    turn_binding = _bind(turn_refs, index, turn_matched, Binding())
    # Owned references are the turn references followed by the invocation-only ones.
    owned_binding = _bind(
        invocation_refs,
        index,
        dict(turn_matched),
        Binding(
            list(turn_binding.references),
            [],
            list(turn_binding.missing_references),
            list(turn_binding.duplicated_references),
        ),
    )
    return Evidence(
        trajectory_observed=observed,
        turns_observed=observed and "turns_unavailable" not in codes,
        turn_call_scope_complete=observed and "turn_model_call_scope_incomplete" not in codes,
        model_calls_observed=observed and codes.isdisjoint(CAPTURE_GAP_CODES),
        calls=calls,
        turn_binding=turn_binding,
        owned_binding=owned_binding,
        gaps=gaps,
        trajectory=trajectory if observed else None,
        transcript_prompt=prompt,
        transcript_completion=completion,
    )
