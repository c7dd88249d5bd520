"""Plans from client-named ``materialized_inputs`` files, read as little and as safely as possible.

The path comes from a client, so only NeMo Gym's own file name (``*_materialized_inputs.jsonl``),
a regular file, no symlink, optionally under ``serve --inputs-root``, is streamed with caps.
"""

from __future__ import annotations

import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog

from sidecar.wire import MAX_MATERIALIZED_LINE_BYTES, TooManyTasks, materialized_lines, plan_from_lines

__all__ = [
    "MATERIALIZED_REFUSED",
    "MATERIALIZED_SUFFIX",
    "MAX_MATERIALIZED_INPUTS_BYTES",
    "MAX_MATERIALIZED_LINE_BYTES",
    "PlanError",
    "plan_from_materialized",
]

_log = structlog.get_logger("sidecar.ingest.plans")


class PlanError(ValueError):
    """The materialized inputs named by ``run_started`` cannot be read into a plan."""

    def __init__(self, message: str, *, field: str, index: int = 0) -> None:
        super().__init__(message)
        self.field = field
        self.index = index


#: Largest materialized-inputs file the service reads to derive a plan.
MAX_MATERIALIZED_INPUTS_BYTES = 4 << 30
#: The only file names accepted by default: what NeMo Gym writes beside the rollouts.
MATERIALIZED_SUFFIX = "_materialized_inputs.jsonl"
#: What every refused materialized-inputs path gets, whatever the reason (a missing file, a
#: symlink, a device, a file outside the inputs root, a line that does not parse): the answer
#: must not tell a client anything about a path it named.
MATERIALIZED_REFUSED = (
    "materialized inputs not accepted: give a readable regular file (not a symlink) named "
    f"*{MATERIALIZED_SUFFIX}, inside the service's --inputs-root when one is set, holding one JSON "
    "object with _ng_task_index per line; the service log says why it was refused"
)
#: Every client-named file is read on this one thread: one read at a time, and the buffers of
#: every read reuse one allocator arena, so N concurrent requests cost one line cap, not N.
_READER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="materialized-inputs")


def _refuse(path: str, reason: str) -> PlanError:
    _log.warning("materialized inputs refused", path=path[:4096], reason=reason)
    return PlanError(MATERIALIZED_REFUSED, field="materialized_inputs")


def _confined(path: str, root: Path | None) -> str | None:
    """Why ``path`` may not be read (``None``: it may)."""
    if not os.path.basename(path).endswith(MATERIALIZED_SUFFIX):
        return f"name does not end in {MATERIALIZED_SUFFIX}"
    if root is not None:
        real = os.path.realpath(path)
        if os.path.commonpath([real, str(root)]) != str(root):
            return f"outside the inputs root {str(root)!r}"
    return None


def plan_from_materialized(
    path: str,
    *,
    max_bytes: int = MAX_MATERIALIZED_INPUTS_BYTES,
    root: Path | None = None,
    max_line_bytes: int = MAX_MATERIALIZED_LINE_BYTES,
    max_tasks: int | None = None,
) -> dict[str, int]:
    """Repeats per ``str(_ng_task_index)`` counted over a materialized-inputs JSONL file; every
    refusal raises the same :class:`PlanError`, the reason going to the service log only."""
    return _READER.submit(_read_plan, path, max_bytes, root, max_line_bytes, max_tasks).result()


def _read_plan(
    path: str, max_bytes: int, root: Path | None, max_line_bytes: int, max_tasks: int | None
) -> dict[str, int]:
    reason = _confined(path, None if root is None else Path(os.path.realpath(root)))
    if reason is not None:
        raise _refuse(path, reason)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise _refuse(path, f"cannot open: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > max_bytes:
        os.close(fd)
        why = "not a regular file" if not stat.S_ISREG(info.st_mode) else f"over the {max_bytes}-byte limit"
        raise _refuse(path, why)
    with os.fdopen(fd, "rb", buffering=0) as handle:
        try:
            return plan_from_lines(materialized_lines(handle, max_line_bytes), max_tasks=max_tasks)
        except TooManyTasks as exc:
            raise PlanError(str(exc), field="materialized_inputs") from None
        except (OSError, ValueError) as exc:
            raise _refuse(path, str(exc)) from None
