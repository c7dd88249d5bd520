"""A snapshot: every run's state as of one journal seq, as MessagePack of plain values only
(a forged one can be refused, never run code), stamped with its format and state schema."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

import msgspec
import pydantic

from sidecar.journal import STATE_SCHEMA, pack, unpack

if TYPE_CHECKING:
    from sidecar.state.run import RunState

__all__ = ["SNAPSHOT_FORMAT", "Restored", "SnapshotError", "decode_state", "encode_state"]

#: Version of the snapshot's layout; bump on any change of what a state class writes.
SNAPSHOT_FORMAT = 3


class SnapshotError(ValueError):
    """A snapshot this build cannot use; the message says why."""


class Restored(NamedTuple):
    seq: int
    next_group: int
    runs: dict[str, RunState]


def encode_state(seq: int, next_group: int, runs: Mapping[str, RunState]) -> bytes:
    """Every run of ``runs`` as of journal seq ``seq``; ``next_group`` is the closed-groups
    reference the next group gets (groups from it on are not this snapshot's)."""
    return pack(
        {
            "format": SNAPSHOT_FORMAT,
            "state_schema": STATE_SCHEMA,
            "seq": seq,
            "next_group": next_group,
            "runs": [run.to_snapshot() for run in runs.values()],
        }
    )


def decode_state(body: bytes, attach: Callable[[dict[str, Any]], RunState]) -> Restored:
    """The runs a snapshot holds, each rebuilt by ``attach`` (``RunState.from_snapshot`` with the
    service's engines and settings); raises :class:`SnapshotError` naming what is wrong."""
    try:
        data = unpack(body)
    except msgspec.DecodeError as exc:
        raise SnapshotError(f"not a snapshot ({exc})") from None
    if not isinstance(data, dict):
        raise SnapshotError(f"not a snapshot (a {type(data).__name__})")
    if data.get("format") != SNAPSHOT_FORMAT or data.get("state_schema") != STATE_SCHEMA:
        raise SnapshotError(
            f"format {data.get('format')!r} / state schema {data.get('state_schema')!r}; this build "
            f"reads format {SNAPSHOT_FORMAT} / {STATE_SCHEMA!r}"
        )
    try:
        runs = [attach(run) for run in data["runs"]]
        return Restored(int(data["seq"]), int(data["next_group"]), {run.run_id: run for run in runs})
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, pydantic.ValidationError) as exc:
        raise SnapshotError(f"a state of the wrong shape ({type(exc).__name__}: {exc})"[:500]) from None
