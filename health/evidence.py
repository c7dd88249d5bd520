"""Derived evidence of one rollout: availability flags, the normalized call view and bindings,
read from the validated trajectory (the values its canonical dump would hold), payloads by reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from msgspec import Struct

from .binding import Binding, Call, CallScan, bind, call_identity
from .views import ModelCallView, TrajectoryView

__all__ = [
    "CAPTURE_GAP_CODES",
    "CONTRADICTION_GAP_KINDS",
    "LENGTH_FINISH_REASONS",
    "Binding",
    "Call",
    "Evidence",
    "Gap",
    "build_evidence",
    "call_identity",
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
LENGTH_FINISH_REASONS: frozenset[str] = frozenset({"length", "max_output_tokens", "max_tokens"})


class Gap(Struct, frozen=True):
    code: str
    invocation_id: str | None
    detail: str | None


class Evidence(Struct):
    """What the rollout checks may read; the ``*_observed`` flags gate them.

    A struct (as are :class:`Binding` and :class:`Gap`): one is built per row, and a struct's
    constructor runs in C, keywords and defaults included."""

    trajectory_observed: bool
    turns_observed: bool
    turn_call_scope_complete: bool
    model_calls_observed: bool
    calls: list[Call]
    unusual_calls: list[Call]
    """The :attr:`Call.unusual` calls, in order: most rollouts have none, and the per-call
    checks and gates skip their loops then."""
    failed_calls: list[Call]
    """The calls that failed, in order."""
    turn_binding: Binding
    owned_binding: Binding
    gaps: list[Gap]
    trajectory: TrajectoryView | None
    transcript_prompt: int | None
    transcript_completion: int | None
    capture_prompt: int = 0
    """``prompt_tokens`` summed over every captured call (a missing count as 0)."""
    capture_completion: int = 0
    """``completion_tokens`` summed likewise."""
    duplicated_calls: int = 0
    """Calls whose replay identity (:func:`call_identity`) an earlier call already has."""
    all_successful: bool = True
    """Every captured call :attr:`Call.successful`."""
    turn_steps: list[tuple[int, bool, bool, bool]] | None = None
    """Memo of the turn analysis shared by the two turn checks (see ``health.checks``)."""
    ended_chains: list[tuple[list[Call], Call]] | None = None
    """Memo of the per-model chains that ended on a failed call, shared by the rule that
    reports them and the digest's ``ended_on_error`` (see ``health.checks.ended_chains``)."""
    unusual_owned: list[tuple[int, Call]] | None = None
    """Memo of the unusual owned calls with their positions among the owned calls, which the
    per-call checks read (see ``health.checks``)."""

    @property
    def usage_present(self) -> bool:
        return self.transcript_prompt is not None and self.transcript_completion is not None

    @property
    def has_contradiction_gap(self) -> bool:
        return any(gap.code in CONTRADICTION_GAP_KINDS for gap in self.gaps)


def _int_or_none(value: object) -> int | None:
    """A usage value counts only as a JSON integer >= 0 (booleans and floats do not)."""
    if type(value) is int and value >= 0:
        return value
    return None


def transcript_usage(record: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """``response.usage`` input / output tokens (or prompt / completion) read from the raw record;
    ``None`` marks a missing side."""
    response = record.get("response")
    if not isinstance(response, dict):
        return None, None
    return usage_tokens(response.get("usage"))


def usage_tokens(usage: Any) -> tuple[int | None, int | None]:
    """:func:`transcript_usage` of a record whose ``response.usage`` is ``usage``."""
    if not isinstance(usage, dict):
        return None, None
    prompt = usage["input_tokens"] if "input_tokens" in usage else usage.get("prompt_tokens")
    completion = usage["output_tokens"] if "output_tokens" in usage else usage.get("completion_tokens")
    return _int_or_none(prompt), _int_or_none(completion)


def _scan_calls(model_calls: Sequence[ModelCallView], responses: Sequence[Any]) -> CallScan:
    calls: list[Call] = []
    unusual: list[Call] = []
    by_id: dict[str, Call] = {}
    shared: dict[str, list[Call]] = {}
    response_keys: set[str] = set()
    prompt = completion = duplicated = 0
    all_successful = True
    for position, (model_call, response) in enumerate(zip(model_calls, responses, strict=True)):
        # Each call's Call is built here, not by a helper, and the scan reads these locals back:
        # this runs for every captured call of every row.
        metadata = model_call.response_metadata
        stats = model_call.token_stats
        server_ref = metadata.model_ref
        call_id = model_call.model_call_id
        response_id = metadata.response_id
        status_code = metadata.status_code
        error_category = metadata.error_category
        response_status = metadata.response_status
        finish_reason = metadata.finish_reason
        tokens_in = stats.prompt_tokens
        tokens_out = stats.completion_tokens
        failed = (
            (status_code is not None and status_code >= 400)
            or bool(error_category)
            or response_status in _FAILED_RESPONSE_STATUSES
        )
        successful = not failed and (status_code is None or 200 <= status_code <= 399)
        # token counts are ints or None: ``not tokens_out`` is "missing or zero"
        is_unusual = failed or tokens_in is None or not tokens_out or finish_reason in LENGTH_FINISH_REASONS
        call = Call(
            position,
            model_call.started_at,
            call_id,
            response_id,
            None if server_ref is None else (server_ref.type, server_ref.name),
            status_code,
            response_status,
            finish_reason,
            error_category,
            tokens_in,
            tokens_out,
            response,
            failed,
            successful,
            is_unusual,
        )
        calls.append(call)
        if is_unusual:
            unusual.append(call)
        if not successful:
            all_successful = False
        if call_id:  # the replay identity (``call_identity``): ``call:<id>`` ...
            first = by_id.setdefault(call_id, call)
            if first is not call:
                duplicated += 1
                shared.setdefault(call_id, [first]).append(call)
        elif response_id:  # ... else ``response:...``, which never equals a ``call:`` one
            key = call_identity(call)
            if key in response_keys:
                duplicated += 1
            else:
                response_keys.add(key)  # type: ignore[arg-type]
        if tokens_in:
            prompt += tokens_in
        if tokens_out:
            completion += tokens_out
    return CallScan(calls, unusual, by_id, shared, prompt, completion, duplicated, all_successful)


_NO_CODES: frozenset[str] = frozenset()
_NO_USAGE: tuple[int | None, int | None] = (None, None)


def build_evidence(
    trajectory: TrajectoryView | None,
    record: Mapping[str, Any],
    responses: Sequence[Any] | None = None,
    *,
    usage: tuple[int | None, int | None] | None = None,
) -> Evidence:
    """Evidence for a validated trajectory (or ``None``); ``usage`` stands in for the transcript
    usage read from ``record``, ``responses`` for the calls' responses (the fast path keeps them raw)."""
    prompt, completion = transcript_usage(record) if usage is None else usage
    gaps: list[Gap] = []
    codes: frozenset[str] | set[str] = _NO_CODES
    if trajectory is not None and trajectory.gaps:
        gaps = [Gap(gap.code, gap.invocation_id, gap.detail) for gap in trajectory.gaps]
        codes = {gap.code for gap in gaps}
    observed = trajectory is not None and "trajectory_projection_failed" not in codes
    if not observed or trajectory is None:
        return Evidence(
            trajectory_observed=False,
            turns_observed=False,
            turn_call_scope_complete=False,
            model_calls_observed=False,
            calls=[],
            unusual_calls=[],
            failed_calls=[],
            turn_binding=Binding(),
            owned_binding=Binding(),
            gaps=gaps,
            trajectory=None,
            transcript_prompt=prompt,
            transcript_completion=completion,
        )
    model_calls = trajectory.model_calls
    if responses is None:
        responses = [call.response for call in model_calls]
    scan = _scan_calls(model_calls, responses)
    unusual_calls = scan.unusual_calls
    turn_binding, owned_binding = bind(trajectory, scan)
    return Evidence(
        trajectory_observed=True,
        turns_observed="turns_unavailable" not in codes,
        turn_call_scope_complete="turn_model_call_scope_incomplete" not in codes,
        model_calls_observed=codes.isdisjoint(CAPTURE_GAP_CODES),
        calls=scan.calls,
        unusual_calls=unusual_calls,
        failed_calls=[call for call in unusual_calls if call.failed] if unusual_calls else [],
        turn_binding=turn_binding,
        owned_binding=owned_binding,
        gaps=gaps,
        trajectory=trajectory,
        transcript_prompt=prompt,
        transcript_completion=completion,
        capture_prompt=scan.capture_prompt,
        capture_completion=scan.capture_completion,
        duplicated_calls=scan.duplicated_calls,
        all_successful=scan.all_successful,
    )
