"""The pure per-record step: one JSONL line (or parsed record) in, one rollout digest out; never raises.

A line takes the fast road (decoded from its bytes, :mod:`health.line_record`) or else the full
one (orjson, then the derived structs or the pydantic contract); both give the same digest.
Deliberate difference from NeMo Gym 0.7.0, which aborts the run: an identity value that cannot
be ``int | str`` makes the line unreadable (``"reason": "rollout record identity is invalid"``).
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
from .jsonl import stripped
from .line_record import LineRecord, Refusal, decode_line, line_dependence, line_inputs
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


def _fast_walk(
    data: bytes | memoryview, ordinal: int, ignored: frozenset[str]
) -> tuple[_Walked, LineRecord] | Refusal:
    """The fast road: the walk and the record it decoded, or why only the full road can decide."""
    line = decode_line(data)
    if isinstance(line, Refusal):
        return line
    inputs = line_inputs(line, ordinal)
    if inputs is None:
        return Refusal.LINE
    return _Walked(*inputs, walk(inputs[1], None, ignored)), line


def _walk_line(
    data: bytes | memoryview, location: Location, ignored: frozenset[str]
) -> tuple[_Walked | UnreadableLine, PositionDependence]:
    """Read and walk one line (fast road, else full road): the walk (or why the line has no
    readable identity) and its position dependence."""
    data = stripped(data)  # a record line stays a view of the read buffer: no 70 KB copy
    fast = _fast_walk(data, location.ordinal, ignored)
    if not isinstance(fast, Refusal):
        suffix = line_dependence(fast[1])
        return fast[0], None if suffix is None else OrdinalIdentity(suffix or None)
    data = bytes(data)
    record, error = parse_line(data)
    walked, _ = _digest_parsed(record, error, location, ignored, len(data), fast is not Refusal.TRAJECTORY)
    if isinstance(walked, UnreadableLine):
        return walked, walked
    assert record is not None
    return walked, _parsed_dependence(record)


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
    """:func:`digest_line` compact, and how the digest depends on the line's position, so a map
    task that knows only split-local positions lets the driver place the line globally."""
    location = Location(source_path, source_index, line_number, ordinal)
    walked, dependence = _walk_line(data, location, ignored_checks)
    return _compact_form(walked, location, ignored_checks), dependence


def digest_everyday_compact(
    data: bytes,
    *,
    source_path: str,
    source_index: int,
    line_number: int,
    ordinal: int,
    ignored_checks: frozenset[str] = frozenset(),
) -> tuple[CompactDigest, LineRecord] | None:
    """The fast road alone: the compact digest and the :class:`LineRecord` it read (the live
    service reads its keys too), or ``None`` where only the full road can decide."""
    fast = _fast_walk(data, ordinal, ignored_checks)
    if isinstance(fast, Refusal):
        return None
    location = Location(source_path, source_index, line_number, ordinal)
    return _compact_form(fast[0], location, ignored_checks), fast[1]


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
    walked = _digest_parsed(record, parse_error, location, ignored_checks, None)[0]
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
) -> tuple[RolloutDigest, TrajectoryCheck | None]:
    """:func:`digest_record` and the trajectory validation it did (``None``: none), so that
    ``ng_perf`` validates once."""
    location = Location(source_path, source_index, line_number, ordinal)
    walked, checked = _digest_parsed(record, parse_error, location, ignored_checks, None)
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
    try_strict: bool = True,
) -> tuple[_Walked | UnreadableLine, TrajectoryCheck | None]:
    """The walk of a parsed record, or why it has no readable identity (``line_size``: the raw
    line's length in bytes, when known; ``try_strict``: whether the derived structs may vouch for
    the trajectory before the contract, false where they refused it already)."""
    identity = _readable_identity(record, parse_error, location.ordinal)
    if not isinstance(identity, Identity):
        return UnreadableLine(identity), None
    assert record is not None
    raw = record.get("ng_trajectory")
    trajectory: Any = None
    trajectory_error: str | None = None
    checked: TrajectoryCheck | None = None
    if raw is not None:
        strict = strict_trajectory(raw) if try_strict else None
        if strict is not None and _dump_safe(strict, raw, line_size, strict=True):
            checked = (strict, None)
            trajectory = strict  # a derived struct, already shown safe to dump
        else:
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
    """The validated trajectory, or why it is unreadable; the canonical dump is only made where
    :func:`_dump_safe` cannot rule out its one failure (nesting beyond 254 levels)."""
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
    """True where the canonical dump surely cannot fail: a line too short for 254 nested brackets,
    or orjson (same nesting limit) serializing every free-form value the dump keeps."""
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
