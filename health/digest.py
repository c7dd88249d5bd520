"""The pure per-record step: one JSONL line (or parsed record) in, one rollout digest out.

Parse, identify, validate the trajectory, derive evidence,
walk the rollout checks in registry order with their gates, derive the preliminary verdict
(before the duplicate-identity post-pass) and the digest statistics. Never raises.

One deliberate difference from NeMo Gym 0.7.0: where the reference aborts the whole run
because an identity value cannot be coerced to ``int | str`` (``"_ng_task_index": null``, a
fractional or beyond-64-bit float, an array or object, likewise for ``_ng_rollout_index`` and
a non-null ``stage_index``), this step treats the line like an unreadable one: synthetic
identity, every other non-ignored rollout check unobserved, and a ``record_unreadable``
finding whose detail is ``{"reason": "rollout record identity is invalid", "error":
"ValidationError", "field": <key>}``. The locator is ``{"source_file", "line"}`` as for an
unreadable line, and the statistics are all zero.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import orjson
from msgspec import UNSET, Struct

from .compact import CompactDigest
from .contract.canonical import VALIDATION_ERROR, check_trajectory
from .digest_forms import compact_from_walk, digest_from_walk
from .evidence import Evidence, build_evidence, usage_tokens
from .fast_path import EverydayRecord, read_everyday_record, read_stripped_line
from .identity import (
    ROLLOUT_ID_KEY,
    ROLLOUT_INDEX_KEY,
    TASK_INDEX_KEY,
    Identity,
    InvalidIdentity,
    identity_of,
    resolve_identity,
)
from .jsonl import stripped
from .parse import parse_line
from .rejection import RejectedRecord
from .strict_schema import StrictRecord
from .unreadable import unreadable_compact, unreadable_digest
from .walk import PLAIN_WALK_APPLIES, BindingView, WalkOutcome, walk, walk_plain

if TYPE_CHECKING:
    from .contract.models import TrajectoryRecord
    from .types import RolloutDigest

__all__ = [
    "BindingView",
    "Location",
    "OrdinalIdentity",
    "PositionDependence",
    "TrajectoryCheck",
    "UnreadableLine",
    "digest_everyday",
    "digest_everyday_compact",
    "digest_line",
    "digest_line_compact",
    "digest_line_placed",
    "digest_record",
    "digest_record_with_trajectory",
]

_DUMP_DEPTH_LIMIT = 254
_NO_RECORD: dict[str, Any] = {}
_NO_USAGE: tuple[int | None, int | None] = (None, None)


TrajectoryCheck: TypeAlias = "tuple[TrajectoryRecord, None] | tuple[None, str]"
"""``check_trajectory``'s outcome for a record's ``ng_trajectory``: the validated record or the
error name. Validity only: a valid record may still fail the canonical dump (too deep)."""


class Location(NamedTuple):
    """Where a record sits: its file, the file's index among the run's, its line, and its
    ordinal (position among all the run's records, the task index of a record without one)."""

    source_path: str
    source_index: int
    line_number: int
    ordinal: int


class OrdinalIdentity(NamedTuple):
    """A readable record without ``_ng_task_index``: its task index is its ordinal."""

    rollout_suffix: str | None
    """``str`` of the raw rollout index when the rollout id is derived as ``"<ordinal>-<suffix>"``
    (the record names no rollout id of its own); ``None`` when the record's own id stands."""


class UnreadableLine(NamedTuple):
    """A line without a readable identity: its digest is :func:`~health.unreadable.unreadable_digest`."""

    detail: dict[str, Any]


PositionDependence: TypeAlias = OrdinalIdentity | UnreadableLine | None
"""How a line's digest depends on its position besides the ``ordinal`` field (``None``: it does not)."""


def digest_line(
    data: bytes,
    *,
    source_path: str,
    source_index: int,
    line_number: int,
    ordinal: int,
    ignored_checks: frozenset[str] = frozenset(),
) -> RolloutDigest:
    """Digest one non-blank physical line (raw bytes, surrounding whitespace allowed).

    Plainly valid records take the fast path (:mod:`health.fast_path`), which vouches for
    the same inputs without materializing the payloads; every other line is parsed and
    validated in full, and the outcome is the same either way.
    """
    location = Location(source_path, source_index, line_number, ordinal)
    return _digest_form(_walk_line(data, location, ignored_checks)[0], location, ignored_checks)


def digest_line_placed(
    data: bytes,
    *,
    source_path: str,
    source_index: int,
    line_number: int,
    ordinal: int,
    ignored_checks: frozenset[str] = frozenset(),
) -> tuple[RolloutDigest, PositionDependence]:
    """:func:`digest_line`, also saying how the digest depends on the line's position.

    A map task that knows only split-local positions uses it to hand the driver what it needs
    to place the line globally without digesting it again: for an unreadable line the
    ``record_unreadable`` detail, for a record without ``_ng_task_index`` whether its rollout
    id derives from the ordinal.
    """
    location = Location(source_path, source_index, line_number, ordinal)
    walked, dependence = _walk_line(data, location, ignored_checks)
    return _digest_form(walked, location, ignored_checks), dependence


def digest_line_compact(
    data: bytes | memoryview,
    *,
    source_path: str,
    source_index: int,
    line_number: int,
    ordinal: int,
    ignored_checks: frozenset[str] = frozenset(),
) -> tuple[CompactDigest, PositionDependence]:
    """:func:`digest_line_placed` with the digest in its compact form, packed straight from the
    walk (what a batch worker sends back and the one way a line becomes a compact digest): no
    ``RolloutDigest`` or ``Finding`` model is built, so pydantic is imported only for a line
    the fast path leaves to the contract.

    ``data`` may be a view of a read buffer: it is read in place, and nothing returned refers
    to it."""
    location = Location(source_path, source_index, line_number, ordinal)
    walked, dependence = _walk_line(data, location, ignored_checks)
    return _compact_form(walked, location, ignored_checks), dependence


class _Walked(Struct):
    """A record's identity, evidence and walk: what either digest form is made of (a struct:
    one is built per row, in C)."""

    identity: Identity
    evidence: Evidence
    outcome: WalkOutcome

    def digest(self, ordinal: int) -> RolloutDigest:
        return digest_from_walk(self.identity, self.evidence, self.outcome, ordinal)

    def compact(self, ordinal: int) -> CompactDigest:
        return compact_from_walk(self.identity, self.evidence, self.outcome, ordinal)


def _digest_form(
    walked: _Walked | UnreadableLine, location: Location, ignored_checks: frozenset[str]
) -> RolloutDigest:
    if isinstance(walked, UnreadableLine):
        return unreadable_digest(walked.detail, *location, ignored_checks)
    return walked.digest(location.ordinal)


def _compact_form(
    walked: _Walked | UnreadableLine, location: Location, ignored_checks: frozenset[str]
) -> CompactDigest:
    if isinstance(walked, UnreadableLine):
        return unreadable_compact(walked.detail, *location, ignored_checks)
    return walked.compact(location.ordinal)


def _walk_line(
    data: bytes | memoryview, location: Location, ignored_checks: frozenset[str]
) -> tuple[_Walked | UnreadableLine, PositionDependence]:
    """The line's walk (or why it has no readable identity) and its position dependence:
    the fast path where it reads the line or proves its trajectory invalid, else the full
    path (orjson, the contract, the walk)."""
    ordinal = location.ordinal
    outcome = read_stripped_line(stripped(data))
    if isinstance(outcome, EverydayRecord):
        walked = _everyday_walked(outcome, ordinal, ignored_checks)
        if walked is not None:
            return walked, _everyday_dependence(outcome.record)
    elif outcome is not None:
        walked = _rejected_walked(outcome, ordinal, ignored_checks)
        if walked is not None:
            return walked, _rejected_dependence(outcome)
    if type(data) is not bytes:  # a view of a batch worker's read buffer (the full path is rare)
        data = bytes(data)
    record, error = parse_line(data)
    parsed = _digest_parsed(record, error, location, ignored_checks, len(data), None)[0]
    if isinstance(parsed, UnreadableLine):
        return parsed, parsed
    assert record is not None
    return parsed, _parsed_dependence(record)


def _rejected_walked(
    rejected: RejectedRecord, ordinal: int, ignored_checks: frozenset[str]
) -> _Walked | None:
    """The full path's walk of a record whose trajectory fails validation, without parsing it
    again; ``None`` defers an invalid identity."""
    identity = identity_of(
        ordinal if rejected.task_index is UNSET else rejected.task_index,
        0 if rejected.rollout_index is UNSET else rejected.rollout_index,
        rejected.stage_index,
        rejected.rollout_id,
        rejected.trajectory_rollout_id,
    )
    if isinstance(identity, InvalidIdentity):
        return None
    evidence = build_evidence(None, {"response": rejected.response})
    return _Walked(identity, evidence, _outcome(evidence, VALIDATION_ERROR, ignored_checks, plain=False))


def _digest_rejected(
    rejected: RejectedRecord, location: Location, ignored_checks: frozenset[str]
) -> tuple[RolloutDigest, PositionDependence] | None:
    """The digest of a record whose trajectory surely fails validation (see :func:`_rejected_walked`)."""
    ordinal = location.ordinal
    walked = _rejected_walked(rejected, ordinal, ignored_checks)
    return None if walked is None else (walked.digest(ordinal), _rejected_dependence(rejected))


def _rejected_dependence(rejected: RejectedRecord) -> OrdinalIdentity | None:
    if rejected.task_index is not UNSET:
        return None
    own_id = rejected.rollout_id or rejected.trajectory_rollout_id
    raw_rollout = 0 if rejected.rollout_index is UNSET else rejected.rollout_index
    return OrdinalIdentity(None if own_id else f"{raw_rollout}")


def _everyday_dependence(record: StrictRecord) -> OrdinalIdentity | None:
    if record.task_index is not UNSET:
        return None
    trajectory = record.ng_trajectory
    own_id = record.rollout_id or (None if trajectory is None else trajectory.rollout_id)
    raw_rollout = 0 if record.rollout_index is UNSET else record.rollout_index
    return OrdinalIdentity(None if own_id else f"{raw_rollout}")


def _parsed_dependence(record: dict[str, Any]) -> OrdinalIdentity | None:
    if TASK_INDEX_KEY in record:
        return None
    trajectory = record.get("ng_trajectory")
    own_id = record.get(ROLLOUT_ID_KEY) or (
        trajectory.get("rollout_id") if isinstance(trajectory, dict) else None
    )
    return OrdinalIdentity(None if own_id else f"{record.get(ROLLOUT_INDEX_KEY, 0)}")


def digest_everyday(
    data: bytes,
    *,
    source_path: str,
    source_index: int,
    line_number: int,
    ordinal: int,
    ignored_checks: frozenset[str] = frozenset(),
    shallow_json: bool = False,
) -> tuple[RolloutDigest, StrictRecord] | None:
    """:func:`digest_line`'s fast path alone, for a stripped line or a row's bytes: the digest
    of a record it vouches for and the strict record it read (whose ``ng_trajectory`` the
    contract accepts with the same values), or ``None`` where only the full path can decide.
    ``shallow_json``: see :func:`health.fast_path.read_everyday_record`."""
    everyday = read_everyday_record(data, shallow_json=shallow_json)
    if everyday is None:
        return None
    walked = _everyday_walked(everyday, ordinal, ignored_checks)
    return None if walked is None else (walked.digest(ordinal), everyday.record)


def digest_everyday_compact(
    data: bytes,
    *,
    source_path: str,
    source_index: int,
    line_number: int,
    ordinal: int,
    ignored_checks: frozenset[str] = frozenset(),
    shallow_json: bool = False,
) -> tuple[CompactDigest, StrictRecord] | None:
    """:func:`digest_everyday` with the digest in its compact form (as
    :func:`~health.compact.compact_digest` packs it), built without the pydantic digest."""
    everyday = read_everyday_record(data, shallow_json=shallow_json)
    if everyday is None:
        return None
    walked = _everyday_walked(everyday, ordinal, ignored_checks)
    return None if walked is None else (walked.compact(ordinal), everyday.record)


def digest_record(
    record: dict[str, Any] | None,
    *,
    parse_error: str | None = None,
    source_path: str = "",
    source_index: int = 0,
    line_number: int = 0,
    ordinal: int = 0,
    ignored_checks: frozenset[str] = frozenset(),
) -> RolloutDigest:
    """Digest a record parsed with orjson semantics; ``parse_error`` marks an unreadable line."""
    location = Location(source_path, source_index, line_number, ordinal)
    walked = _digest_parsed(record, parse_error, location, ignored_checks, None, None)[0]
    return _digest_form(walked, location, ignored_checks)


def digest_record_with_trajectory(
    record: dict[str, Any] | None,
    *,
    parse_error: str | None = None,
    source_path: str = "",
    source_index: int = 0,
    line_number: int = 0,
    ordinal: int = 0,
    ignored_checks: frozenset[str] = frozenset(),
    checked: TrajectoryCheck | None = None,
) -> tuple[RolloutDigest, TrajectoryCheck | None]:
    """:func:`digest_record`, also handing back the trajectory validation it did.

    The second item is ``check_trajectory(record["ng_trajectory"])`` when the step validated
    it, ``None`` when it did not (unreadable record, invalid identity, no ``ng_trajectory``),
    so a caller that needs the validated ``TrajectoryRecord`` too (``ng_perf``) validates once.
    ``checked``, when given, must be that same outcome, computed earlier by the caller; the
    step then uses it instead of validating again.
    """
    location = Location(source_path, source_index, line_number, ordinal)
    walked, checked = _digest_parsed(record, parse_error, location, ignored_checks, None, checked)
    return _digest_form(walked, location, ignored_checks), checked


def _digest_parsed(
    record: dict[str, Any] | None,
    parse_error: str | None,
    location: Location,
    ignored_checks: frozenset[str],
    line_size: int | None,
    checked: TrajectoryCheck | None,
) -> tuple[_Walked | UnreadableLine, TrajectoryCheck | None]:
    """The full path's walk of a parsed record, or why it has no readable identity.
    ``line_size`` is the raw line's length in bytes, when known; ``checked`` a prior validation."""
    identity = _readable_identity(record, parse_error, location.ordinal)
    if not isinstance(identity, Identity):
        return UnreadableLine(identity), None
    assert record is not None
    raw = record.get("ng_trajectory")
    if raw is None:
        checked = None
    elif checked is None:
        checked = check_trajectory(raw)
    trajectory, trajectory_error = _depth_guarded(raw, checked, line_size)
    evidence = build_evidence(trajectory, record)
    outcome = _outcome(evidence, trajectory_error, ignored_checks, plain=False)
    return _Walked(identity, evidence, outcome), checked


def _readable_identity(
    record: dict[str, Any] | None, parse_error: str | None, ordinal: int
) -> Identity | dict[str, Any]:
    """The record's identity, or the ``record_unreadable`` detail saying why it has none."""
    if not isinstance(record, dict) or parse_error is not None:
        return {"reason": "rollout record is unreadable", "error": parse_error or "ValueError"}
    identity = resolve_identity(record, ordinal)
    if isinstance(identity, InvalidIdentity):
        return {
            "reason": "rollout record identity is invalid",
            "error": "ValidationError",
            "field": identity.field,
        }
    return identity


def _outcome(
    evidence: Evidence, trajectory_error: str | None, ignored_checks: frozenset[str], *, plain: bool
) -> WalkOutcome:
    """The checks' walk. ``plain``: it may take :func:`walk_plain` where the evidence allows
    (the fast path's records only, so that the full path, which always walks in full, keeps
    checking it)."""
    if (
        plain
        and PLAIN_WALK_APPLIES
        and not ignored_checks
        and trajectory_error is None
        and evidence.trajectory_observed
        and not evidence.gaps
    ):
        return walk_plain(evidence)
    return walk(evidence, trajectory_error, ignored_checks)


def _everyday_walked(
    everyday: EverydayRecord, ordinal: int, ignored_checks: frozenset[str]
) -> _Walked | None:
    """The walk of a record the fast path vouches for; ``None`` defers an invalid identity."""
    record = everyday.record
    trajectory = record.ng_trajectory
    identity = identity_of(
        ordinal if record.task_index is UNSET else record.task_index,
        0 if record.rollout_index is UNSET else record.rollout_index,
        record.stage_index,
        record.rollout_id,
        None if trajectory is None else trajectory.rollout_id,
    )
    if isinstance(identity, InvalidIdentity):
        return None
    usage = _NO_USAGE if record.response is None else usage_tokens(record.response.usage)
    evidence = build_evidence(trajectory, _NO_RECORD, everyday.responses, usage=usage)
    return _Walked(identity, evidence, _outcome(evidence, None, ignored_checks, plain=True))


def _digest_everyday(
    everyday: EverydayRecord, location: Location, ignored_checks: frozenset[str]
) -> RolloutDigest | None:
    """The digest of a record the fast path vouches for; ``None`` defers an invalid identity."""
    ordinal = location.ordinal
    walked = _everyday_walked(everyday, ordinal, ignored_checks)
    return None if walked is None else walked.digest(ordinal)


def _depth_guarded(
    raw: Any, checked: TrajectoryCheck | None, line_size: int | None
) -> tuple[TrajectoryRecord | None, str | None]:
    """The validated ``ng_trajectory`` (``checked``) or why it is unreadable; ``(None, None)`` if absent.

    The canonical dump is never materialized: the checks read validated attributes, which
    equal their dumped values. The dump's one failure mode, a free-form value nested more than
    254 levels, is ruled out cheaply (a line too short to hold that many brackets, or orjson,
    whose nesting limit is the same, serializing the free-form values) before the real dump.
    """
    if checked is None:
        return None, None
    trajectory, error = checked
    if trajectory is None:
        return None, error
    if line_size is not None and line_size <= 2 * _DUMP_DEPTH_LIMIT:
        return trajectory, None
    try:
        orjson.dumps(_free_form_values(trajectory, raw))
        return trajectory, None
    except Exception:  # too deep, not encodable, or an unexpected raw shape: dump for real
        pass
    try:
        trajectory.model_dump(mode="json")
    except Exception as exc:  # depth overflow raises ValueError; report any failure by name
        return None, type(exc).__name__
    return trajectory, None


def _free_form_values(trajectory: TrajectoryRecord, raw: Any) -> list[Any]:
    """Every value the dump serializes by inference, each one level down a list (for orjson).

    These are the only places the dump's nesting limit can be hit: ``request`` / ``response``,
    the turns' ``question`` / ``answer`` / ``reasoning_content``, tool ``output``, and the
    conversation items that did not take the fast path (model instances keeping ``Any`` fields
    and unknown keys; their raw invocation is serialized instead, one level deeper). orjson
    refuses exactly what is nested deeper than 254 levels, so passing here, each value at most
    253 deep, rules the dump's failure out; anything orjson refuses (too deep, or a value it
    cannot encode) falls back to the real dump. The fast path's canonical items hold only
    strings and cannot nest.
    """
    values: list[Any] = []
    append = values.append
    for call in trajectory.model_calls:
        append(call.request)
        append(call.response)
    for turn in trajectory.turns:
        append(turn.question)
        append(turn.answer)
        append(turn.reasoning_content)
    for tool_call in trajectory.tool_calls:
        append(tool_call.output)
    for position, invocation in enumerate(trajectory.invocations):
        for item in invocation.conversation:
            if item.__class__ is not dict:
                append(raw["invocations"][position])
                break
    return values
