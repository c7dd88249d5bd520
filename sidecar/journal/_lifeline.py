"""Tie a worker process's life to its parent's, even when the parent is SIGKILLed.

A worker arms ``PR_SET_PDEATHSIG`` (Linux) or, where that is not available, runs a watchdog
thread that exits once its parent is gone. The worker's initializer lives here, in a module
that imports only the standard library, so a freshly spawned worker arms itself before it
imports the heavy pipeline: a parent killed while its worker is still starting up leaves it
running only until that worker reaches its initializer, which must be soon.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import signal
import sys
import threading
import time

__all__ = ["die_with_parent", "init_worker"]

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_WATCHDOG_INTERVAL_S = 0.5


def _arm_parent_death_signal() -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies (Linux); False if unavailable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int, interval_s: float) -> None:
    """Exit the process as soon as ``parent_pid`` is no longer its parent (it died; we were reparented)."""
    while os.getppid() == parent_pid:
        time.sleep(interval_s)
    os._exit(1)


def die_with_parent(parent_pid: int, interval_s: float = _WATCHDOG_INTERVAL_S) -> None:
    """Make this process end when ``parent_pid`` (its parent) ends, however that ends.

    The kernel's death signal fires when the *thread* that spawned this process ends, so the
    parent must spawn from a thread that lives as long as it does (the event-loop thread). A
    parent that died before the signal was armed is caught by the ``getppid`` check after it.
    """
    if not _arm_parent_death_signal():
        threading.Thread(
            target=_watch_parent, args=(parent_pid, interval_s), name="parent-watchdog", daemon=True
        ).start()
    if os.getppid() != parent_pid:
        os._exit(1)


def init_worker(parent_pid: int, then: str) -> None:
    """Pool initializer: :func:`die_with_parent`, then call ``then`` (``"module:function"``).

    ``then`` is named, not passed, so that unpickling this initializer imports nothing heavy.
    """
    die_with_parent(parent_pid)
    module, _, name = then.partition(":")
    getattr(importlib.import_module(module), name)()
