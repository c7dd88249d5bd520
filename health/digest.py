"""The pure per-record step: one JSONL line (or parsed record) in, one rollout digest out.

Parse (orjson, :mod:`health.parse`), identify, validate the trajectory, derive evidence,
walk the rollout checks in registry order with their gates, derive the preliminary verdict
(before the duplicate-identity post-pass) and the digest statistics. Never raises.

A line takes one of two roads, with the same outcome: **fast**, decoded straight from its
bytes without its payloads (:mod:`health.line_record`), else **full**: orjson parses it, and
its trajectory is vouched for by the derived structs
(:func:`~health.contract.strict.strict_trajectory`) or, where they cannot decide, by the
pydantic contract itself.

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
from msgspec import Struct

from .compact import CompactDigest, expand_digest
from .contract.canonical import check_trajectory
from .contract.strict import strict_trajectory
from .evidence import Evidence, build_evidence
from .identity import (
    ROLLOUT_ID_KEY,
    ROLLOUT_INDEX_KEY,
    TASK_INDEX_KEY,
    Identity,
    InvalidIdentity,
    resolve_identity,
)
from .line_record import LineRecord, decode_line, line_dependence, line_inputs
from .parse import parse_line
from .unreadable import unreadable_compact
from .walk import WalkOutcome, compact_from_walk, walk

if TYPE_CHECKING:
    from .types import RolloutDigest

__all__ = [
    "Location",
    "OrdinalIdentity",
    "PositionDependence",
    "TrajectoryCheck",
    "UnreadableLine",
    "digest_everyday_compact",
    "digest_line",
    "digest_line_compact",
    "digest_record",
    "digest_record_with_trajectory",
]

_DUMP_DEPTH_LIMIT = 254

TrajectoryCheck: TypeAlias = "tuple[Any, None] | tuple[None, str]"
"""The validated ``ng_trajectory`` (a derived struct or the contract's ``TrajectoryRecord``,
with the same field values) or the error name. A valid record may still fail the dump (too deep)."""


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
    """A line without a readable identity: its digest is :func:`~health.unreadable.unreadable_compact`."""

    detail: dict[str, Any]


PositionDependence: TypeAlias = OrdinalIdentity | UnreadableLine | None
"""How a line's digest depends on its position besides the ``ordinal`` field (``None``: it does not)."""


class _Walked(Struct):
    """A record's identity, evidence and walk: what either digest form is made of."""

    identity: Identity
    evidence: Evidence
    outcome: WalkOutcome


def _digest_form(
    walked: _Walked | UnreadableLine, location: Location, ignored: frozenset[str]
) -> RolloutDigest:
    return expand_digest(_compact_form(walked, location, ignored))


def _compact_form(
    walked: _Walked | UnreadableLine, location: Location, ignored: frozenset[str]
) -> CompactDigest:
    if isinstance(walked, UnreadableLine):
        return unreadable_compact(walked.detail, *location, ignored)
    return compact_from_walk(walked.identity, walked.evidence, walked.outcome, location.ordinal)


def _walk_line(
    data: bytes | memoryview, location: Location, ignored: frozenset[str]
) -> tuple[_Walked | UnreadableLine, PositionDependence, LineRecord | dict[str, Any] | None]:
    """Read and walk one line (fast road, else full road): the walk (or why the line has no
    readable identity), its position dependence, and the record it read."""
    data = bytes(data).strip()
    line = decode_line(data)
    inputs = None if line is None else line_inputs(line, location.ordinal)
    if line is not None and inputs is not None:
        suffix = line_dependence(line)
        dependence = None if suffix is None else OrdinalIdentity(suffix or None)
        return _Walked(*inputs, walk(inputs[1], None, ignored)), dependence, line
    record, error = parse_line(data)
    walked, _ = _digest_parsed(record, error, location, ignored, len(data), None)
    if isinstance(walked, UnreadableLine):
        return walked, walked, None
    assert record is not None
    return walked, _parsed_dependence(record), record


def digest_line(
    data: bytes,
    *,
    source_path: str,
    source_index: int,
    line_number: int,
    ordinal: int,
    ignored_checks: frozenset[str] = frozenset(),
) -> RolloutDigest:
    """Digest one non-blank physical line (raw bytes, surrounding whitespace allowed)."""
    location = Location(source_path, source_index, line_number, ordinal)
    return _digest_form(_walk_line(data, location, ignored_checks)[0], location, ignored_checks)


def digest_line_compact(
    data: bytes | memoryview,
    *,
    source_path: str,
    source_index: int,
    line_number: int,
    ordinal: int,
    ignored_checks: frozenset[str] = frozenset(),
) -> tuple[CompactDigest, PositionDependence]:
    """:func:`digest_line` in the compact form (what a batch worker sends back), and how the
    digest depends on the line's position, so that a map task that knows only split-local
    positions hands the driver what it needs to place the line globally: for an unreadable
    line the ``record_unreadable`` detail, for a record without ``_ng_task_index`` whether its
    rollout id derives from the ordinal. ``data`` may be a view of a read buffer."""
    location = Location(source_path, source_index, line_number, ordinal)
    walked, dependence, _ = _walk_line(data, location, ignored_checks)
    return _compact_form(walked, location, ignored_checks), dependence


def digest_everyday_compact(
    data: bytes,
    *,
    source_path: str,
    source_index: int,
    line_number: int,
    ordinal: int,
    ignored_checks: frozenset[str] = frozenset(),
    shallow_json: bool = False,
) -> tuple[CompactDigest, LineRecord] | None:
    """:func:`digest_line_compact`'s fast road alone, for a stripped line or a row's bytes: the
    compact digest and the :class:`LineRecord` it read (the keys the live service reads too),
    or ``None`` where only the full road can decide. ``shallow_json`` is accepted for the live
    service's call and changes nothing."""
    location = Location(source_path, source_index, line_number, ordinal)
    line = decode_line(data)
    inputs = None if line is None else line_inputs(line, ordinal)
    if line is None or inputs is None:
        return None
    walked = _Walked(*inputs, walk(inputs[1], None, ignored_checks))
    return _compact_form(walked, location, ignored_checks), line


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

    The second item is the validated ``record["ng_trajectory"]`` (or its error name) when the
    step validated it, ``None`` when it did not (unreadable record, invalid identity, no
    ``ng_trajectory``), so a caller that needs the validated trajectory too (``ng_perf``)
    validates once. ``checked``, when given, must be that same outcome, computed earlier.
    """
    location = Location(source_path, source_index, line_number, ordinal)
    walked, checked = _digest_parsed(record, parse_error, location, ignored_checks, None, checked)
    return _digest_form(walked, location, ignored_checks), checked


def _parsed_dependence(record: dict[str, Any]) -> OrdinalIdentity | None:
    if TASK_INDEX_KEY in record:
        return None
    trajectory = record.get("ng_trajectory")
    own_id = record.get(ROLLOUT_ID_KEY) or (
        trajectory.get("rollout_id") if isinstance(trajectory, dict) else None
    )
    return OrdinalIdentity(None if own_id else f"{record.get(ROLLOUT_INDEX_KEY, 0)}")


def _digest_parsed(
    record: dict[str, Any] | None,
    parse_error: str | None,
    location: Location,
    ignored_checks: frozenset[str],
    line_size: int | None,
    checked: TrajectoryCheck | None,
) -> tuple[_Walked | UnreadableLine, TrajectoryCheck | None]:
    """The walk of a parsed record, or why it has no readable identity. ``line_size`` is the
    raw line's length in bytes, when known; ``checked`` a prior validation."""
    identity = _readable_identity(record, parse_error, location.ordinal)
    if not isinstance(identity, Identity):
        return UnreadableLine(identity), None
    assert record is not None
    raw = record.get("ng_trajectory")
    trajectory: Any = None
    trajectory_error: str | None = None
    if raw is None:
        checked = None
    else:
        if checked is None:
            strict = strict_trajectory(raw)
            if strict is not None and _dump_safe(strict, raw, line_size, strict=True):
                checked = (strict, None)
        if checked is not None and checked[0] is not None and not hasattr(checked[0], "model_dump"):
            trajectory = checked[0]  # a derived struct, already shown safe to dump
        else:
            if checked is None:
                checked = check_trajectory(raw)
            trajectory, trajectory_error = _depth_guarded(raw, checked, line_size)
    evidence = build_evidence(trajectory, record)
    return _Walked(identity, evidence, walk(evidence, trajectory_error, ignored_checks)), checked


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


def _depth_guarded(raw: Any, checked: TrajectoryCheck, line_size: int | None) -> tuple[Any, str | None]:
    """The contract's validated trajectory, or why it is unreadable (its error, or the dump's).

    The canonical dump is never materialized: the checks read validated attributes, which
    equal their dumped values. Its one failure mode, a free-form value nested more than 254
    levels, is ruled out cheaply (:func:`_dump_safe`) before the real dump decides."""
    trajectory, error = checked
    if trajectory is None:
        return None, error
    if _dump_safe(trajectory, raw, line_size, strict=False):
        return trajectory, None
    try:
        trajectory.model_dump(mode="json")
    except Exception as exc:  # depth overflow raises ValueError; report any failure by name
        return None, type(exc).__name__
    return trajectory, None


def _dump_safe(trajectory: Any, raw: Any, line_size: int | None, *, strict: bool) -> bool:
    """True where the canonical dump surely cannot fail: a line too short to hold 254 nested
    brackets, or orjson (whose nesting limit is the dump's) serializing every free-form value.

    Those are ``request`` / ``response``, the turns' ``question`` / ``answer`` /
    ``reasoning_content``, tool ``output``, and the conversation items the dump keeps as
    models (each whole raw invocation, one level deeper; a ``strict`` struct keeps every item
    raw, so every non-empty conversation counts)."""
    if line_size is not None and line_size <= 2 * _DUMP_DEPTH_LIMIT:
        return True
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
        if any(strict or item.__class__ is not dict for item in invocation.conversation):
            append(raw["invocations"][position])
    try:
        orjson.dumps(values)
    except Exception:  # too deep, or not encodable: the real dump decides
        return False
    return True
