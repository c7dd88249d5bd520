"""A byte-based progress bar on stderr for long batch runs.

Shown only when the stream is a terminal and the input is large, so pipes, CI logs and
small runs see no extra output; ``rich`` is imported only when the bar is really drawn.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from .runner import ProgressCallback

__all__ = ["LARGE_INPUT_BYTES", "terminal_progress"]

LARGE_INPUT_BYTES = 64 << 20


@contextmanager
def terminal_progress(
    total_bytes: int, stream: TextIO, *, min_bytes: int = LARGE_INPUT_BYTES
) -> Iterator[ProgressCallback | None]:
    """Yield a progress callback drawing on ``stream``, or ``None`` when no bar is wanted."""
    if total_bytes < min_bytes or not stream.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    columns = (
        TextColumn("health-check"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
    )
    # No auto-refresh thread: workers forked meanwhile must not inherit its locks; the runner's
    # callback drives the redraws.
    with Progress(*columns, console=Console(file=stream), transient=True, auto_refresh=False) as bar:
        task = bar.add_task("health-check", total=total_bytes)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total, refresh=True)

        yield update
