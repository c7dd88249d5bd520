"""A synthetic run as the sidecar's ingest API sees it, next to the files NeMo Gym writes.

Tests, benchmarks and the reliability suite all need the same three views of one generated
run: the ``/v1`` events a dispatcher would post, the lines of ``rollouts.jsonl`` and
``rollouts_failures.jsonl`` (so a batch health check can be compared with the live report),
and the tracker calls the events imply.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from ._schedule import RolloutEvent

__all__ = ["ApiStep", "api_steps"]

RowHook = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ApiStep:
    """One ingest event and what NeMo Gym would have written for it."""

    event: dict[str, Any]
    main_line: bytes | None
    """The line appended to ``rollouts.jsonl`` (results and torn lines)."""
    failure_line: bytes | None
    """The line appended to ``rollouts_failures.jsonl`` (failure rows)."""
    tracker_op: tuple[str, float | None] | None
    """The ``DispatchLatencyTracker`` call the event feeds (``record``, ``record_failure``, ...)."""


def api_steps(events: Iterable[RolloutEvent], *, row_hook: RowHook | None = None) -> Iterator[ApiStep]:
    """Convert generated dispatches in order; ``row_hook`` may rewrite result and failure rows.

    A torn line travels as raw text with its line number in ``rollouts.jsonl`` (the follower's
    shape, with no time); one that is blank or not valid UTF-8 cannot travel in a JSON string and
    is skipped in every view, so the views stay consistent. Every other event is stamped ``at``
    its simulated finish, as ``dispatcher_client`` stamps it.
    """
    main_lines = 0
    for event in events:
        seconds = event.latency_seconds
        if event.kind == "result":
            assert event.row is not None
            row = event.row if row_hook is None else row_hook(event.row)
            main_lines += 1
            completed = {"kind": "completed", "at": event.finished_at, "seconds": seconds, "row": row}
            yield ApiStep(completed, orjson.dumps(row) + b"\n", None, ("record", seconds))
        elif event.kind == "unreadable":
            assert event.line is not None
            try:
                text = event.line.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if not text.strip():
                continue
            main_lines += 1
            line = event.line if event.line.endswith(b"\n") else event.line + b"\n"
            raw = {"kind": "completed", "seconds": seconds or 0.0, "line": text, "line_number": main_lines}
            yield ApiStep(raw, line, None, ("record", seconds or 0.0))
        elif event.kind == "failure":
            assert event.row is not None
            row = event.row if row_hook is None else row_hook(event.row)
            failed = {"kind": "failed", "at": event.finished_at, "seconds": seconds, "row": row}
            op = None if seconds is None else ("record_failure", seconds)
            yield ApiStep(failed, None, orjson.dumps(row) + b"\n", op)
        else:
            identity = {"task_index": event.task_index, "rollout_index": event.rollout_index}
            drained = {"kind": "drained", "at": event.finished_at, **identity}
            yield ApiStep(drained, None, None, ("record_drained", None))
