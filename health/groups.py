"""A reducer's task groups: their digests, packed as MessagePack blobs for the live service,
and the repeat tally the task checks read.

A group is its only digest, a packed blob of its digests, a list of digests / blobs, or (an
``int``) the reference of its blob in the reducer's :class:`~health.reduce.GroupStore`.
"""

from __future__ import annotations

from functools import lru_cache
from typing import cast

import msgspec

from .check_terms import TaskIndex
from .compact import HEALTHY, POLICY_CALLS_OBSERVED, UNHEALTHY, VERDICTS, CompactDigest
from .registry import ROLLOUT_CHECK_IDS
from .tasks import RepeatInput, RepeatTally, tally_repeats

__all__ = [
    "DECODER",
    "Group",
    "Identity",
    "mask_positions",
    "members",
    "pack",
    "packed_append",
    "tally_group",
]

Identity = tuple[TaskIndex | None, TaskIndex, TaskIndex]
Group = CompactDigest | bytes | list[CompactDigest | bytes] | int
_new_tuple = tuple.__new__
"""Builds a named tuple from a tuple of its fields in C (its own ``__new__`` is a Python call)."""

_ENCODER = msgspec.msgpack.Encoder()
DECODER = msgspec.msgpack.Decoder(list[CompactDigest])
_CHUNK = 32
"""Most digests one packed blob holds; a larger task group is a list of such blobs."""


def pack(members: list[CompactDigest]) -> bytes | None:
    """``members`` as one MessagePack blob, or ``None`` if a value would not come back the same
    (an integer beyond 64 bits, a string with lone surrogates, a ``bool`` index)."""
    try:
        blob = _ENCODER.encode(members)
        if DECODER.decode(blob) == members:
            return blob
    except (msgspec.MsgspecError, ValueError, OverflowError, TypeError):
        pass
    return None


def members(group: Group) -> list[CompactDigest]:
    """An in-memory task group's digests, in arrival order (packed blobs decoded)."""
    if type(group) is bytes:
        return DECODER.decode(group)
    if type(group) is list:
        members: list[CompactDigest] = []
        for part in group:
            if type(part) is bytes:
                members += DECODER.decode(part)
            else:
                members.append(part)  # type: ignore[arg-type]
        return members
    return [group]  # type: ignore[list-item]


def packed_append(group: Group, digest: CompactDigest, members: list[CompactDigest] | None) -> Group:
    """``group`` (packed; ``members``: its decoded digests, if known) with ``digest`` appended:
    into its last blob while that holds fewer than ``_CHUNK`` digests, else as a new part. A new
    list, never the old one changed, so a :meth:`HealthReducer.cut` that holds it stays whole."""
    if type(group) is bytes:
        if members is None:
            members = DECODER.decode(group)
        if len(members) < _CHUNK and (blob := pack([*members, digest])) is not None:
            return blob
        return [group, pack([digest]) or digest]
    if type(group) is list:
        last = group[-1]
        if type(last) is bytes:
            tail = DECODER.decode(last)
            if len(tail) < _CHUNK and (blob := pack([*tail, digest])) is not None:
                return [*group[:-1], blob]
        return [*group, pack([digest]) or digest]
    return [group, pack([digest]) or digest]  # type: ignore[list-item]


@lru_cache(maxsize=4096)
def mask_positions(mask: int) -> tuple[int, ...]:
    return tuple(pos for pos in range(len(ROLLOUT_CHECK_IDS)) if mask >> pos & 1)


def tally_group(
    members: list[CompactDigest] | CompactDigest, duplicates: dict[Identity, int] | None
) -> RepeatTally:
    """:func:`~health.tasks.tally_repeats` of a task group's digests, read straight from them, a
    counted identity (``duplicates``; ``None``: none in this group) unhealthy. Runs for every task of
    every summary, so verdicts stay codes and the usual group skips the collapse."""
    if type(members) is not list:
        members = [cast("CompactDigest", members)]
    elif duplicates is None:
        healthy = unhealthy = 0
        all_policy_observed = True
        any_successful = False
        rollouts = set()
        for digest in members:
            rollouts.add(digest.rollout_index)
            verdict = digest.verdict
            if verdict == HEALTHY:
                healthy += 1
            elif verdict == UNHEALTHY:
                unhealthy += 1
            if not digest.flags & POLICY_CALLS_OBSERVED:
                all_policy_observed = False
            if digest.successful_model_calls > 0:
                any_successful = True
        if len(rollouts) == len(members):
            return _new_tuple(
                RepeatTally, (len(members), healthy, unhealthy, all_policy_observed, any_successful)
            )
    return _collapsed_tally(members, duplicates)


def _collapsed_tally(members: list[CompactDigest], duplicates: dict[Identity, int] | None) -> RepeatTally:
    """:func:`tally_group` for any group: :func:`~health.tasks.tally_repeats` of its digests."""
    return tally_repeats(
        RepeatInput(
            digest.rollout_index,
            "unhealthy"
            if duplicates and duplicates.get((digest.stage_index, digest.task_index, digest.rollout_index))
            else VERDICTS[digest.verdict],
            bool(digest.flags & POLICY_CALLS_OBSERVED),
            digest.successful_model_calls,
        )
        for digest in members
    )
