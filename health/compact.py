"""A compact, picklable form of :class:`~health.types.RolloutDigest`: findings pre-rendered to
report JSON, ``unobserved`` as a bitmask, flags in one integer (a few hundred bytes a rollout).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import IntEnum
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import orjson

from .check_terms import TaskIndex, Verdict
from .registry import CHECK_IDS, ROLLOUT_CHECK_IDS

if TYPE_CHECKING:
    from .types import Finding, RolloutDigest

__all__ = [
    "VERDICTS",
    "CompactDigest",
    "PlainFinding",
    "VerdictCode",
    "built_digest",
    "compact_digest",
    "compact_values",
    "dumps_compact",
    "expand_digest",
    "finding_positions",
    "render_findings",
    "rollout_subject",
    "unobserved_ids",
    "unobserved_mask",
]


class VerdictCode(IntEnum):
    """A compact digest's ``verdict``: the code of its verdict, stored as the plain int (digests
    cross process pools and the journal) and named by :data:`VERDICTS` (``VERDICTS[code]``)."""

    HEALTHY = 0
    UNHEALTHY = 1
    UNOBSERVED = 2


#: Each :class:`VerdictCode`'s verdict, indexed by the code.
VERDICTS: tuple[Verdict, Verdict, Verdict] = ("healthy", "unhealthy", "unobserved")
HEALTHY: Final = int(VerdictCode.HEALTHY)
UNHEALTHY: Final = int(VerdictCode.UNHEALTHY)
UNOBSERVED: Final = int(VerdictCode.UNOBSERVED)
_VERDICT_CODE: dict[str, int] = {verdict: code for code, verdict in enumerate(VERDICTS)}
_ROLLOUT_BIT: dict[str, int] = {check: 1 << pos for pos, check in enumerate(ROLLOUT_CHECK_IDS)}
_CHECK_POS: dict[str, int] = {check: pos for pos, check in enumerate(CHECK_IDS)}
DUPLICATE_CHECK_POS = _CHECK_POS["rollout_duplicate_identity"]

CAPTURE_OBSERVED = 1
POLICY_CALLS_OBSERVED = 2
ENDED_ON_ERROR = 4


class CompactDigest(NamedTuple):
    """One rollout's digest, as a flat tuple (field meanings follow ``RolloutDigest``)."""

    ordinal: int
    task_index: TaskIndex
    rollout_index: TaskIndex
    stage_index: TaskIndex | None
    rollout_id: str
    verdict: int
    """A :class:`VerdictCode` as its int (``VERDICTS[verdict]`` is its name)."""
    findings: bytes
    """Compact JSON array of ``{"check", "locator"?, "detail"}`` objects, as rows write them."""
    finding_checks: tuple[int, ...]
    """``CHECK_IDS`` positions of the findings, in order (-1 for an unknown ID)."""
    unobserved: int | tuple[str, ...]
    """Bitmask over ``ROLLOUT_CHECK_IDS``, or the explicit list if it is not in registry order."""
    flags: int
    model_calls: int
    successful_model_calls: int
    model_call_errors: int
    errors_by_status: tuple[tuple[str, int], ...]
    duplicated_calls: int
    transcript_prompt_tokens: int
    transcript_completion_tokens: int
    capture_prompt_tokens: int
    capture_completion_tokens: int


class PlainFinding(NamedTuple):
    """A rollout check's finding before any pydantic model (subject implied; locator and detail
    hold only values a ``Finding`` keeps as they are)."""

    check: str
    locator: dict[str, Any] | None
    detail: dict[str, Any]


def dumps_compact(value: Any) -> bytes:
    """Compact JSON as orjson writes it; integers orjson cannot hold fall back to ``json``."""
    try:
        return orjson.dumps(value)
    except TypeError:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def rollout_subject(task_index: TaskIndex, rollout_index: TaskIndex) -> dict[str, TaskIndex]:
    """The subject every rollout-scope finding carries: the rollout's task, repeat, stage and id."""
    return {"_ng_task_index": task_index, "_ng_rollout_index": rollout_index}


def render_findings(findings: Sequence[PlainFinding] | Sequence[Finding]) -> bytes:
    """:attr:`CompactDigest.findings` for a digest's findings, in order."""
    if not findings:
        return b"[]"
    rendered: list[dict[str, Any]] = []
    for finding in findings:
        item: dict[str, Any] = {"check": finding.check}
        if finding.locator is not None:
            item["locator"] = finding.locator
        item["detail"] = finding.detail
        rendered.append(item)
    return dumps_compact(rendered)


def finding_positions(findings: Sequence[PlainFinding] | Sequence[Finding]) -> tuple[int, ...]:
    """:attr:`CompactDigest.finding_checks` for a digest's findings, in order."""
    return tuple([_CHECK_POS.get(finding.check, -1) for finding in findings]) if findings else ()


def unobserved_mask(unobserved: list[str]) -> int | tuple[str, ...]:
    """:attr:`CompactDigest.unobserved` for the unobserved check IDs, in the order marked."""
    mask = 0
    last = 0
    for check in unobserved:
        bit = _ROLLOUT_BIT.get(check, 0)
        if bit <= last:
            return tuple(unobserved)
        mask |= bit
        last = bit
    return mask


def compact_digest(digest: RolloutDigest) -> CompactDigest:
    """Pack ``digest`` (the per-record step's output) into its compact form."""
    return compact_values(digest.__dict__)


def compact_values(values: Mapping[str, Any]) -> CompactDigest:
    """Pack a digest's field values (``RolloutDigest``'s fields; findings as :class:`PlainFinding`
    or ``Finding``) into its compact form; runs once per rollout in the workers."""
    findings = values["findings"]
    errors_by_status = values["errors_by_status"]
    flags = (
        (CAPTURE_OBSERVED if values["capture_observed"] else 0)
        | (POLICY_CALLS_OBSERVED if values["policy_calls_observed"] else 0)
        | (ENDED_ON_ERROR if values["ended_on_error"] else 0)
    )
    return CompactDigest(
        values["ordinal"],
        values["task_index"],
        values["rollout_index"],
        values["stage_index"],
        values["rollout_id"],
        _VERDICT_CODE[values["verdict"]],
        render_findings(findings),
        finding_positions(findings),
        unobserved_mask(values["unobserved"]),
        flags,
        values["model_calls"],
        values["successful_model_calls"],
        values["model_call_errors"],
        tuple(errors_by_status.items()) if errors_by_status else (),
        values["duplicated_calls"],
        values["transcript_prompt_tokens"],
        values["transcript_completion_tokens"],
        values["capture_prompt_tokens"],
        values["capture_completion_tokens"],
    )


@lru_cache(maxsize=4096)
def _ids_of_mask(mask: int) -> tuple[str, ...]:
    return tuple(check for check in ROLLOUT_CHECK_IDS if mask & _ROLLOUT_BIT[check])


def unobserved_ids(digest: CompactDigest) -> tuple[str, ...]:
    """The digest's ``unobserved`` check IDs, in the order they were marked."""
    if isinstance(digest.unobserved, int):
        return _ids_of_mask(digest.unobserved)
    return digest.unobserved


_new_model = object.__new__
_set = object.__setattr__


def built_digest(values: dict[str, Any]) -> RolloutDigest:
    """``RolloutDigest.model_construct(**values)`` for values of the field types, in field order,
    without its per-call walk over aliases and defaults (which made unpacking several times slower)."""
    from .types import RolloutDigest

    digest: RolloutDigest = _new_model(RolloutDigest)
    _set(digest, "__dict__", values)
    _set(digest, "__pydantic_fields_set__", set(values))
    _set(digest, "__pydantic_extra__", None)
    _set(digest, "__pydantic_private__", None)
    return digest


def expand_digest(digest: CompactDigest, duplicate_count: int = 0) -> RolloutDigest:
    """Rebuild the full ``RolloutDigest``, with the duplicate-identity finding if any (two records
    claiming one rollout identity)."""
    from .types import Finding

    task_index = digest.task_index
    rollout_index = digest.rollout_index
    duplicated = duplicate_count >= 2
    findings: list[Finding] = []
    if duplicated or digest.findings != b"[]":  # most rollouts have no finding at all
        subject = rollout_subject(task_index, rollout_index)
        findings = [
            Finding(check=item["check"], subject=subject, locator=item.get("locator"), detail=item["detail"])
            for item in orjson.loads(digest.findings)
        ]
        if duplicated:
            findings.append(
                Finding(
                    check="rollout_duplicate_identity",
                    subject=subject,
                    detail={"duplicate_count": duplicate_count},
                )
            )
    verdict = "unhealthy" if duplicated else VERDICTS[digest.verdict]
    flags = digest.flags
    return built_digest(
        {
            "task_index": task_index,
            "rollout_index": rollout_index,
            "stage_index": digest.stage_index,
            "rollout_id": digest.rollout_id,
            "verdict": verdict,
            "findings": findings,
            "unobserved": list(unobserved_ids(digest)),
            "capture_observed": bool(flags & CAPTURE_OBSERVED),
            "policy_calls_observed": bool(flags & POLICY_CALLS_OBSERVED),
            "model_calls": digest.model_calls,
            "successful_model_calls": digest.successful_model_calls,
            "model_call_errors": digest.model_call_errors,
            "errors_by_status": dict(digest.errors_by_status),
            "ended_on_error": bool(flags & ENDED_ON_ERROR),
            "duplicated_calls": digest.duplicated_calls,
            "transcript_prompt_tokens": digest.transcript_prompt_tokens,
            "transcript_completion_tokens": digest.transcript_completion_tokens,
            "capture_prompt_tokens": digest.capture_prompt_tokens,
            "capture_completion_tokens": digest.capture_completion_tokens,
            "ordinal": digest.ordinal,
        }
    )
