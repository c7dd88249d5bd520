"""A process that called ``die_with_parent`` ends when its parent is SIGKILLed (death signal or watchdog)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

_CHILD = """
import os, sys, time
from sidecar.journal import _lifeline
if sys.argv[1] == "watchdog":
    _lifeline._arm_parent_death_signal = lambda: False
_lifeline.die_with_parent(os.getppid(), 0.05)
print("armed", flush=True)
time.sleep(60)
"""

_MIDDLE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
print(child.pid, flush=True)
time.sleep(60)
"""


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return True
    return state == "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
@pytest.mark.parametrize("mechanism", ["death-signal", "watchdog"])
def test_die_with_parent_outlives_no_sigkilled_parent(mechanism: str) -> None:
    middle = subprocess.Popen(
        [sys.executable, "-c", _MIDDLE, _CHILD, mechanism], stdout=subprocess.PIPE, text=True
    )
    try:
        assert middle.stdout is not None
        child = int(middle.stdout.readline())
        assert middle.stdout.readline().strip() == "armed"
        assert not _gone(child)
        middle.kill()
        middle.wait(10)
        deadline = time.monotonic() + 10
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        alive = not _gone(child)
        if alive:
            os.kill(child, signal.SIGKILL)
        assert not alive, f"pid {child} outlived its SIGKILLed parent ({mechanism})"
    finally:
        middle.kill()
        middle.wait(10)
        if middle.stdout is not None:
            middle.stdout.close()


_INIT = """
import ctypes, os, signal
from sidecar.journal._lifeline import init_worker
def hook():
    armed = ctypes.c_int(0)
    ctypes.CDLL(None).prctl(2, ctypes.byref(armed), 0, 0, 0)  # PR_GET_PDEATHSIG
    print("hook", armed.value == signal.SIGKILL, flush=True)
init_worker(os.getppid(), "__main__:hook")
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads the death signal back with prctl")
def test_init_worker_arms_the_death_signal_then_runs_the_named_function() -> None:
    done = subprocess.run([sys.executable, "-c", _INIT], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["hook", "True"]
