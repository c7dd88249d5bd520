"""The health pipeline and perf core a run feeds, as one bundle of functions so tests can
inject one that refuses to be called (a replay never reads a row)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from health.compact import CompactDigest, compact_digest
from health.contract import check_trajectory
from health.digest import digest_everyday_compact, digest_record_with_trajectory
from health.digest import digest_record as health_digest_record
from sidecar.perf import ng_perf_for_trajectory

__all__ = ["Engines", "default_engines", "digest_and_perf", "digest_bytes"]


#: ``(record, parse_error, latency_ms, location)`` -> ``(digest, ng_perf)``; no digest without a location.
DigestAndPerf = Callable[
    [dict[str, Any] | None, str | None, float | None, dict[str, Any] | None],
    tuple[CompactDigest | None, dict[str, Any] | None],
]


def digest_record(record: dict[str, Any] | None, **location: Any) -> CompactDigest:
    """The batch check's digest of one record (``health.digest.digest_record``'s keywords), compact."""
    return compact_digest(health_digest_record(record, **location))


def digest_and_perf(
    record: dict[str, Any] | None,
    parse_error: str | None,
    latency_ms: float | None,
    location: dict[str, Any] | None,
) -> tuple[CompactDigest | None, dict[str, Any] | None]:
    """A row's compact digest at ``location`` (``None`` without one) and its ``ng_perf``, from
    one validation of its ``ng_trajectory``."""
    digest = checked = None
    if location is not None:
        full, checked = digest_record_with_trajectory(record, parse_error=parse_error, **location)
        digest = compact_digest(full)
    raw = record.get("ng_trajectory") if isinstance(record, dict) else None
    if not isinstance(raw, dict):
        return digest, None
    trajectory = (checked or check_trajectory(raw))[0]
    return digest, None if trajectory is None else ng_perf_for_trajectory(trajectory, latency_ms)


#: ``(data, latency_ms, location)`` -> ``(digest, ng_perf, record)``, or ``None`` (not vouched for).
DigestBytes = Callable[
    [bytes, float | None, dict[str, Any]], tuple[CompactDigest, dict[str, Any] | None, Any] | None
]


def digest_bytes(
    data: bytes, latency_ms: float | None, location: dict[str, Any]
) -> tuple[CompactDigest, dict[str, Any] | None, Any] | None:
    """A row's (or line's) compact digest, ``ng_perf`` and the record the health check's fast road
    read from its bytes (the keys the service reads too), where that road vouches for them;
    ``None``: parse the row and use :func:`digest_and_perf`."""
    vouched = digest_everyday_compact(data, **location)
    if vouched is None:
        return None
    digest, record = vouched
    trajectory = record.ng_trajectory  # the contract's fields, as ng_perf reads them
    ng_perf = None if trajectory is None else ng_perf_for_trajectory(cast(Any, trajectory), latency_ms)
    return digest, ng_perf, record


@dataclass(frozen=True, slots=True)
class Engines:
    """What a run computes with: digests when applied, digest and ``ng_perf`` at ingest."""

    digest_record: Callable[..., CompactDigest]
    digest_and_perf: DigestAndPerf
    digest_bytes: DigestBytes


def default_engines() -> Engines:
    """The real perf core and health pipeline."""
    return Engines(digest_record, digest_and_perf, digest_bytes)
