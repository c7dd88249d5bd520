"""Children that get Ctrl-C as a terminal would give it to them."""

from __future__ import annotations

import signal
import subprocess


def _interruptible() -> None:
    """Default disposition, not blocked. A child inherits an ignored or blocked SIGINT from the test
    process, and a library an earlier test in the same worker loaded may have left it so (seen under
    ``pytest -n 2`` only): the child would then never see the Ctrl-C the test is about."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def interruptible_process(argv: list[str]) -> subprocess.Popen[str]:
    """``argv`` started with text pipes for stdout and stderr, ready for a test's SIGINT."""
    return subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_interruptible
    )
