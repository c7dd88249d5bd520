"""A rollout's captured calls as the checks see them, and the turns' and invocations'
``model_calls`` references resolved against them (:func:`bind`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from msgspec import Struct

from .views import CallRefView, OwnerView, TrajectoryView

__all__ = ["Binding", "Call", "CallScan", "ModelRef", "bind", "call_identity"]

ModelRef = tuple[str, str]


class Call(Struct, eq=False, gc=False):
    """One ``model_calls[i]`` entry as the checks see it: a struct (one C call on the hot path,
    untracked by the collector); ``eq=False``: calls compare by identity."""

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


class Binding(Struct):
    """References resolved against the captured calls (see :func:`bind`)."""

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


class CallScan(Struct):
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
    :func:`bind`); the ``(model_ref, response_id)`` index is built on first use."""

    scan: CallScan
    first_by_id: dict[str, CallRefView] = {}
    """The first reference met per non-empty ``model_call_id``."""
    seen: set[tuple[str, str, str, str]] = set()
    """The signatures met, of the references that need them (see :meth:`_met`)."""
    matched: dict[int, Call] = {}
    """The matched calls by position."""
    by_pair: dict[tuple[str, str, str], list[Call]] | None = None

    def _met(self, ref: CallRefView, first: CallRefView | None) -> bool:
        """Whether a reference with the signature of ``ref`` was met before; ``first`` is the first
        reference met with the same non-empty ``model_call_id`` (signatures compared only then)."""
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


def bind(trajectory: TrajectoryView, scan: CallScan) -> tuple[Binding, Binding]:
    """The turn view and the owned view (turn view, then invocation-only refs) of the references,
    deduplicated by signature (``None`` as ``""``) and each resolved once: by ``model_call_id``, else
    by (model_ref, response_id). One match binds, none is missing, more are duplicated."""
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
