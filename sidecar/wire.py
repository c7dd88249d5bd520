"""The wire contract the service and ``dispatcher_client`` share, written once.

What a run id may be, which row keys name a rollout, how a client numbers its events, how a
row becomes JSON however deep it nests, how a materialized-inputs file becomes a plan, and the
event kinds (the service's pydantic models in ``sidecar/ingest/events.py`` define their fields).
Both sides import this module, so they cannot disagree; it stays light (orjson and the
standard library only) because the client imports it.
"""

from __future__ import annotations

import json
import os
import re
import socket
import uuid
from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Any, NamedTuple, Protocol

import orjson

__all__ = [
    "ATTEMPT_KEY",
    "MAX_EVENT_SEQ",
    "MAX_MATERIALIZED_LINE_BYTES",
    "MAX_SOURCE_CHARS",
    "ROLLOUT_KEY",
    "RUN_ID_PATTERN",
    "TASK_KEY",
    "EventKind",
    "EventNumber",
    "FollowerState",
    "LatencyOp",
    "MaterializedInputsError",
    "OutcomeStatus",
    "TooManyTasks",
    "dump_row",
    "materialized_lines",
    "plan_from_lines",
    "row_identity",
    "source_id",
]

#: What a run id may be: it appears in URLs, journal keys and metric labels.
RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")

#: The row keys that name a rollout: task, repeat and attempt, as NeMo Gym writes them.
TASK_KEY = "_ng_task_index"
ROLLOUT_KEY = "_ng_rollout_index"
ATTEMPT_KEY = "_ng_attempt_index"

#: Longest ``source`` (the sending client's name) of a client-assigned event identity.
MAX_SOURCE_CHARS = 128
#: Largest client sequence number (it must fit the journal's signed 64-bit integers).
MAX_EVENT_SEQ = 2**63 - 1

#: Longest line of a materialized-inputs file (one task's inputs) either side reads.
MAX_MATERIALIZED_LINE_BYTES = 16 << 20
_READ_CHUNK = 1 << 20


class FollowerState(StrEnum):
    """``serve --follow``'s follower (``sidecar.http.follow.FollowerThread``), as ``/readyz``
    and the ``follower_state`` metric report it."""

    STARTING = "starting"
    FOLLOWING = "following"
    #: A transient error: restarting from its checkpoint.
    RETRYING = "retrying"
    #: Needs an operator (``/readyz`` answers 503).
    STOPPED = "stopped"


class EventNumber(NamedTuple):
    """A client-assigned event identity, sent as the event's ``source`` and ``seq`` fields.

    ``source`` names one client instance, ``seq`` counts its events; a retried delivery repeats
    both (a duplicate), two calls with byte-identical rows get two numbers (two records).
    """

    source: str
    seq: int


def source_id() -> str:
    """A name unique to one client instance (host, pid, random suffix), at most
    :data:`MAX_SOURCE_CHARS` long."""
    return f"{socket.gethostname()[:64]}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def row_identity(row: Any) -> dict[str, Any]:
    """The event identity fields (``task_index``, ``rollout_index``, ``attempt``) a dispatched
    row carries; keys absent or of the wrong type are left out, so the service falls back to
    the row itself."""
    if not row:
        return {}
    out: dict[str, Any] = {}
    for key, field in ((TASK_KEY, "task_index"), (ROLLOUT_KEY, "rollout_index")):
        value = row.get(key)
        if isinstance(value, int | str) and not isinstance(value, bool):
            out[field] = value
    attempt = row.get(ATTEMPT_KEY)
    if isinstance(attempt, int) and not isinstance(attempt, bool) and attempt >= 0:
        out["attempt"] = attempt
    return out


def dump_row(value: Any, option: int | None = None) -> bytes:
    """``value`` as compact JSON bytes, however deep it nests.

    orjson writes at most 255 levels while it reads up to 1024, so a row nested deeper (which
    the batch check reports ``record_unreadable``) is written by the standard library instead;
    either form parses back to the same value. Raises ``orjson.JSONEncodeError`` when
    ``value`` is not JSON at all.
    """
    try:
        return orjson.dumps(value, option=option)
    except orjson.JSONEncodeError as exc:
        try:
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()
        except (TypeError, ValueError, RecursionError):
            raise exc from None


class MaterializedInputsError(ValueError):
    """A materialized-inputs file that does not give a plan; the message says where and why."""


class TooManyTasks(MaterializedInputsError):
    """A plan with more tasks than the reader's cap."""


class _Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes | None: ...


def materialized_lines(
    handle: _Readable, max_line_bytes: int = MAX_MATERIALIZED_LINE_BYTES
) -> Iterator[bytearray]:
    """The lines of a binary file (split on ``\\n`` only, newline dropped), read in chunks into
    one reused buffer; a line longer than ``max_line_bytes`` raises
    :class:`MaterializedInputsError` having held at most that much. Each yielded buffer is only
    valid until the next line is asked for."""
    line = bytearray()
    while chunk := handle.read(_READ_CHUNK):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            line += memoryview(chunk)[start:end]
            if len(line) > max_line_bytes:
                line.clear()  # now: the exception's frames keep this buffer until a GC pass
                raise MaterializedInputsError(f"a line over the {max_line_bytes}-byte cap")
            yield line
            line.clear()
            start = end + 1
        line += memoryview(chunk)[start:]
        if len(line) > max_line_bytes:
            line.clear()
            raise MaterializedInputsError(f"a line over the {max_line_bytes}-byte cap")
    if line:
        yield line


def plan_from_lines(lines: Iterable[bytes | bytearray], *, max_tasks: int | None = None) -> dict[str, int]:
    """Repeats per ``str(_ng_task_index)`` over the lines of a materialized-inputs file.

    Strict: blank lines are skipped, any other line must be a JSON object with
    ``_ng_task_index``, else :class:`MaterializedInputsError` names the line; more than
    ``max_tasks`` distinct tasks raise :class:`TooManyTasks`.
    """
    plan: dict[str, int] = {}
    for number, line in enumerate(lines, start=1):
        if not line or line.isspace():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise MaterializedInputsError(f"line {number} is not JSON") from None
        if not isinstance(row, dict) or TASK_KEY not in row:
            raise MaterializedInputsError(f"line {number} has no {TASK_KEY}")
        task = str(row[TASK_KEY])
        if task not in plan and max_tasks is not None and len(plan) >= max_tasks:
            raise TooManyTasks(
                f"materialized inputs give more than {max_tasks} tasks (the service's --max-plan-tasks)"
            )
        plan[task] = plan.get(task, 0) + 1
    return plan


class EventKind(StrEnum):
    """An event's ``kind``: which model validates it."""

    RUN_STARTED = "run_started"
    COMPLETED = "completed"
    FAILED = "failed"
    DRAINED = "drained"
    RUN_ENDED = "run_ended"
    LATENCY = "latency"
    STARTED = "started"
    HEARTBEAT = "heartbeat"


class LatencyOp(StrEnum):
    """A ``latency`` event's ``op``: the ``DispatchLatencyTracker`` method it replays."""

    RECORD = "record"
    RECORD_FAILURE = "record_failure"
    RECORD_DRAINED = "record_drained"


class OutcomeStatus(StrEnum):
    """What the service answers for one event of a batch.

    ``accepted``; ``duplicate`` (its idempotency key was stored before); ``unknown_run`` (no
    ``run_started`` yet); ``not_in_flight`` (a heartbeat of an attempt not in flight).
    """

    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    UNKNOWN_RUN = "unknown_run"
    NOT_IN_FLIGHT = "not_in_flight"
