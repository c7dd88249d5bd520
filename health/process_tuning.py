"""Every change this project makes to process-global interpreter settings (the cyclic collector
and the thread switch interval), in one place; and the points where a long loop may step aside.

Only a process's owner (:func:`own_process` for ``health-check`` / ``serve``, :func:`take_over`
for a pool worker or the snapshot writer) enables the helpers below; elsewhere they do nothing.
The batch check pauses the collector over its acyclic digests; ``serve`` raises the young
threshold and lowers the switch interval (see each constant).
"""

from __future__ import annotations

import atexit
import gc
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final, Literal

__all__ = [
    "SERVE_GC_THRESHOLD",
    "SERVE_SWITCH_INTERVAL_S",
    "Entry",
    "collector_paused",
    "freeze_long_lived",
    "imported_for_good",
    "own_process",
    "owner",
    "stepping_aside",
    "take_over",
    "yield_point",
]

Entry = Literal["health-check", "serve", "worker", "snapshot-writer"]

SERVE_GC_THRESHOLD: Final = 10_000
"""The youngest generation's threshold in ``serve`` (default 700): an ingest batch holds thousands
of containers at once, and at 700 nearly every request ran a collection over all of them."""

SERVE_SWITCH_INTERVAL_S: Final = 0.0002
"""The interpreter's thread switch interval in a ``serve`` process (default 5 ms): a CPU-bound
``/report`` or ``/metrics`` build on a worker thread hands the GIL back to the loop quickly."""

_owner: Entry | None = None


def owner() -> Entry | None:
    """The entry point that owns this process's settings (``None``: leave them alone)."""
    return _owner


def take_over(entry: Entry) -> None:
    """For a process this project starts and that ends with its work (a pool worker, a forked
    writer): its settings are ours from now on. A worker freezes what it imported (it lives as
    long as the worker); the snapshot writer pauses the collector (it only serializes)."""
    global _owner
    _owner = entry
    if entry == "worker":
        gc.freeze()
    elif entry == "snapshot-writer":
        gc.disable()


def _freeze_at_exit() -> None:
    """The interpreter's last passes over a finished check's modules and reports free nothing."""
    gc.freeze()


@contextmanager
def own_process(entry: Entry) -> Iterator[None]:
    """For an entry point's handler: the settings of ``entry`` while it runs, and those it
    found afterwards (for a caller that runs the handler in-process, as tests do)."""
    global _owner
    previous, thresholds, interval, collecting = (
        _owner,
        gc.get_threshold(),
        sys.getswitchinterval(),
        gc.isenabled(),
    )
    _owner = entry
    if entry == "serve":
        gc.set_threshold(SERVE_GC_THRESHOLD, *thresholds[1:])
        sys.setswitchinterval(min(interval, SERVE_SWITCH_INTERVAL_S))
    elif entry == "health-check":
        atexit.unregister(_freeze_at_exit)
        atexit.register(_freeze_at_exit)
    try:
        yield
    finally:
        _owner = previous
        gc.set_threshold(*thresholds)
        sys.setswitchinterval(interval)
        if collecting:
            gc.enable()


_pause_lock = threading.Lock()
_pauses = 0  # blocks inside collector_paused now, on any thread
_collecting = False  # whether the collector ran when the first of them began


@contextmanager
def collector_paused(pause: bool = True, *, freeze_after: bool = False) -> Iterator[None]:
    """The block without cyclic-collector passes (where the process is owned and ``pause``),
    then the collector as it was; ``freeze_after`` also freezes what the block left, which
    lives on (the check's digests until the report is written)."""
    if _owner is None or not pause:
        yield
        return
    global _pauses, _collecting
    with _pause_lock:  # blocks on several threads nest: the last one out restores the collector
        if _pauses == 0:
            _collecting = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        if freeze_after:
            gc.freeze()
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _collecting:
                gc.enable()


@contextmanager
def imported_for_good() -> Iterator[None]:
    """Imports without collector passes, then frozen: modules and classes live as long as the
    process. Pending garbage is collected first, so the freeze never keeps a caller's alive."""
    if _owner is None:
        yield
        return
    gc.collect()
    with collector_paused(freeze_after=True):
        yield


def freeze_long_lived() -> None:
    """Move what exists now out of the collector's full passes (an owned process only): for
    state rebuilt once that lives as long as the process and holds no garbage cycles."""
    if _owner is not None:
        gc.freeze()


_aside = threading.local()


def yield_point() -> None:
    """Called every few hundred steps of a long loop (a report over every task): runs the pause
    this thread set with :func:`stepping_aside`, if any (the service's reads let ingest go first)."""
    pause = getattr(_aside, "pause", None)
    if pause is not None:
        pause()


@contextmanager
def stepping_aside(pause: Callable[[], None]) -> Iterator[None]:
    """While this block runs on this thread, :func:`yield_point` calls ``pause``."""
    previous = getattr(_aside, "pause", None)
    _aside.pause = pause
    try:
        yield
    finally:
        _aside.pause = previous
