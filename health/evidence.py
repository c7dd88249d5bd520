"""Derived evidence of one rollout: availability flags, the normalized call view and bindings.

Everything is computed from the *validated* trajectory model, reading the same values its
canonical dump would hold (pydantic's dump of a field is the validated attribute), so no
``model_dump`` round trip is needed. Free-form payloads (``request``/``response``) are
referenced, never copied.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from msgspec import Struct

from .views import CallRefView, ModelCallView, OwnerView, TrajectoryView

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

ModelRef = tuple[str, str]


class Call(Struct, eq=False, gc=False):
    """One ``model_calls[i]`` entry as the checks see it (built by :func:`_scan_calls`).

    A struct, so that it is built in one C call on the per-record hot path (once per
    captured call); untracked by the cyclic collector, since nothing it holds refers back to
    it. ``eq=False``: calls compare by identity. ``response`` is the call's payload as the
    checks may read it: the model's own attribute, or what the fast path materialized.
    """

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
    """A failed call: HTTP status >= 400, a truthy error category, or a failed response status."""
    successful: bool
    """Not failed, and no status or a 2xx/3xx one (a status below 200 is neither)."""
    unusual: bool
    """Failed, stopped for length, or a token count missing or zero: only such a call can give
    a per-call check a finding or close a per-call gate."""

    def __repr__(self) -> str:
        return f"Call({self.call_index!r}, model_call_id={self.model_call_id!r})"


class Gap(Struct, frozen=True):
    code: str
    invocation_id: str | None
    detail: str | None


class Binding(Struct):
    """References resolved against the captured calls (see :func:`_bind`)."""

    references: list[str] = []
    matched_calls: list[Call] = []
    missing_references: list[str] = []
    duplicated_references: list[tuple[str, int]] = []

    @property
    def observed(self) -> bool:
        return bool(self.references)

    @property
    def complete(self) -> bool:
        return bool(self.references) and not self.missing_references and not self.duplicated_references


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


def call_identity(call: Call) -> str | None:
    """Replay identity: ``call:<model_call_id>``, else ``response:<type>:<name>:<response_id>``;
    plain concatenation, so colons can make ids collide."""
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


class _CallScan(Struct):
    """One pass over the captured calls: their view, the lists the checks read, the
    ``model_call_id`` index and the digest statistics."""

    calls: list[Call]
    unusual_calls: list[Call]
    by_id: dict[str, Call]
    """The first call naming each ``model_call_id``."""
    shared_ids: dict[str, list[Call]]
    """Every call naming an id more than one call names (the contract forbids it), in order."""
    capture_prompt: int
    capture_completion: int
    duplicated_calls: int
    all_successful: bool


def _scan_calls(model_calls: Sequence[ModelCallView], responses: Sequence[Any]) -> _CallScan:
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
    return _CallScan(calls, unusual, by_id, shared, prompt, completion, duplicated, all_successful)


def _index_by_pair(calls: list[Call]) -> dict[tuple[str, str, str], list[Call]]:
    by_pair: dict[tuple[str, str, str], list[Call]] = {}
    for call in calls:
        if call.model_ref is not None and call.response_id:
            by_pair.setdefault((call.model_ref[0], call.model_ref[1], call.response_id), []).append(call)
    return by_pair


def _matching(found: list[Call], pair: tuple[str, str] | None, response_id: str | None) -> list[Call]:
    """The calls of one ``model_call_id`` that also match the reference's ``model_ref`` and
    ``response_id`` where it gives them."""
    if pair is not None:
        found = [call for call in found if call.model_ref == pair]
    if response_id is not None:
        found = [call for call in found if call.response_id == response_id]
    return found


def _among(refs: Sequence[CallRefView], owners: Sequence[OwnerView]) -> bool:
    """Whether one of ``owners`` has exactly the references ``refs`` (equal models or structs
    have equal signatures), as an invocation usually has its turn's."""
    count = len(refs)
    for owner in owners:
        known = owner.model_calls
        if len(known) == count and known == refs:
            return True
    return False


def _signature(ref: CallRefView) -> tuple[str, str, str, str]:
    """A reference's identity for deduplication: ``(model_call_id, type, name, response_id)``
    with ``None`` as ``""``."""
    model_ref = ref.model_ref
    if model_ref is None:
        return (ref.model_call_id or "", "", "", ref.response_id or "")
    return (ref.model_call_id or "", model_ref.type, model_ref.name, ref.response_id or "")


class _Binder(Struct):
    """Resolves references against the captured calls, each distinct reference once (see
    :func:`_bind`); the ``(model_ref, response_id)`` index is built on first use."""

    scan: _CallScan
    first_by_id: dict[str, CallRefView] = {}
    """The first reference met per non-empty ``model_call_id``."""
    seen: set[tuple[str, str, str, str]] = set()
    """The signatures met, of the references that need them (see :meth:`_met`)."""
    matched: dict[int, Call] = {}
    """The matched calls by position."""
    by_pair: dict[tuple[str, str, str], list[Call]] | None = None

    def _met(self, ref: CallRefView, first: CallRefView | None) -> bool:
        """Whether a reference with the signature of ``ref`` was met before; ``first`` is the
        first reference met with the same non-empty ``model_call_id`` (``None`` for a reference
        without one).

        Only those share a signature with ``ref``, so a first ``model_call_id`` is remembered
        by its reference alone, and signatures are compared once an id repeats (rarely)."""
        seen = self.seen
        if first is not None:
            seen.add(_signature(first))
        signature = _signature(ref)
        if signature in seen:
            return True
        seen.add(signature)
        return False

    def resolve(self, owners: Sequence[OwnerView], view: Binding, met: Sequence[OwnerView] = ()) -> None:
        """Append the references of ``owners`` not met before to ``view``'s lists; their
        matched calls go to :attr:`matched`. An owner whose references equal, in order, those
        of one of ``met`` (owners resolved already) adds nothing and is passed over whole."""
        first_by_id = self.first_by_id
        matched = self.matched
        by_id = self.scan.by_id
        shared = self.scan.shared_ids
        references = view.references
        missing = view.missing_references
        for owner in owners:
            refs = owner.model_calls
            if met and _among(refs, met):
                continue
            for ref in refs:
                call_id = ref.model_call_id
                if not call_id or (shared and call_id in shared):
                    self._resolve_other(ref, view)
                    continue
                # the everyday reference: by an id one call at most has, compared with that call
                first = first_by_id.get(call_id)
                if first is None:
                    first_by_id[call_id] = ref
                elif self._met(ref, first):
                    continue
                key = "call:" + call_id
                references.append(key)
                only = by_id.get(call_id)
                server_ref = ref.model_ref
                response_id = ref.response_id
                if (
                    only is None
                    or (server_ref is not None and (server_ref.type, server_ref.name) != only.model_ref)
                    or (response_id is not None and response_id != only.response_id)
                ):
                    missing.append(key)
                else:
                    matched.setdefault(only.call_index, only)

    def _resolve_other(self, ref: CallRefView, view: Binding) -> None:
        """:meth:`resolve` for a reference without a ``model_call_id`` or with one that more
        than one call has."""
        if self._met(ref, None):
            return
        call_id = ref.model_call_id
        response_id = ref.response_id
        server_ref = ref.model_ref
        pair = None if server_ref is None else (server_ref.type, server_ref.name)
        if call_id:
            key = "call:" + call_id
        elif pair is None:
            key = f"response:::{response_id}"
        else:
            key = f"response:{pair[0]}:{pair[1]}:{response_id}"
        view.references.append(key)
        found = self._found(call_id, pair, response_id)
        if len(found) == 1:
            only = found[0]
            self.matched.setdefault(only.call_index, only)
        elif found:
            view.duplicated_references.append((key, len(found)))
        else:
            view.missing_references.append(key)

    def _found(self, call_id: str | None, pair: ModelRef | None, response_id: str | None) -> list[Call]:
        """The calls a reference the ``model_call_id`` lookup alone cannot resolve matches: by a
        shared ``model_call_id``, or else by ``(model_ref, response_id)``."""
        if call_id:
            return _matching(self.scan.shared_ids[call_id], pair, response_id)
        if pair is None or not response_id:
            return []
        if self.by_pair is None:
            self.by_pair = _index_by_pair(self.scan.calls)
        return self.by_pair.get((pair[0], pair[1], response_id), [])

    def ordered(self) -> list[Call]:
        """The matched calls in capture order (all of them, as a copy, when every call matched)."""
        matched = self.matched
        calls = self.scan.calls
        if len(matched) == len(calls):
            return calls[:]
        return [matched[position] for position in sorted(matched)]


def _bind(trajectory: TrajectoryView, scan: _CallScan) -> tuple[Binding, Binding]:
    """The turn view and the owned view of the references, resolved against the captured calls.

    References are deduplicated across both views by their signature (model_call_id, type,
    name, response_id) with ``None`` as ``""``, so ``response_id: null`` and ``""`` collapse
    to the first one written. Turn references come first; the owned view is the turn view
    followed by the invocation-only references (the same object when there are none). Each
    distinct reference is resolved once, as it is met, by ``model_call_id`` (then filtered by
    the ref's other keys when present) or else by (model_ref, response_id). One match binds,
    none is missing, more are duplicated.
    """
    binder = _Binder(scan)
    turn_binding = Binding()
    binder.resolve(trajectory.turns, turn_binding)
    turn_binding.matched_calls = binder.ordered()
    owned_only = Binding()
    binder.resolve(trajectory.invocations, owned_only, trajectory.turns)
    if not owned_only.references:
        return turn_binding, turn_binding
    owned_binding = Binding(
        turn_binding.references + owned_only.references,
        binder.ordered(),
        turn_binding.missing_references + owned_only.missing_references,
        turn_binding.duplicated_references + owned_only.duplicated_references,
    )
    return turn_binding, owned_binding


_NO_CODES: frozenset[str] = frozenset()
_NO_USAGE: tuple[int | None, int | None] = (None, None)


def build_evidence(
    trajectory: TrajectoryView | None,
    record: Mapping[str, Any],
    responses: Sequence[Any] | None = None,
    *,
    usage: tuple[int | None, int | None] | None = None,
) -> Evidence:
    """Evidence for a validated trajectory (or ``None`` when absent or unreadable).

    ``record`` supplies the top-level ``response`` (transcript usage), unless ``usage`` gives
    what :func:`transcript_usage` would read from it. ``responses``, when given, stands in for
    ``model_calls[i].response`` (the fast path keeps payloads raw).
    """
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
    turn_binding, owned_binding = _bind(trajectory, scan)
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
