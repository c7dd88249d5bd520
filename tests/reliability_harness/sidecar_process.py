"""A real ``rollout-sidecar serve`` in a child process that can be SIGKILLed and restarted.

The one helper tests and benchmarks start a sidecar process with (and the one ``free_port``).

``launch="exec"`` runs the installed command line exactly as an operator would
(``python -m sidecar.cli serve --port 0 ...``); ``launch="fork"`` forks this interpreter and
calls the same CLI entry point, skipping the ~1 s of imports per restart (CI uses it for its
crash trials). Either way the child writes its structlog lines to ``log_path``; with
``--port 0`` the bound port is read from uvicorn's ``Uvicorn running on http://...:PORT``
line (the service's own ``listening`` line reports the configured port, 0).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import httpx

__all__ = [
    "REPO_ROOT",
    "Launch",
    "SidecarProcess",
    "StartFailed",
    "descendants",
    "free_port",
    "reap_orphans",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
Launch = Literal["exec", "fork"]
_BOUND = re.compile(rb"Uvicorn running on http://[0-9.]+:(\d+)")  # any --host: reached on loopback


def free_port() -> int:
    """A loopback port that was free a moment ago (a fixed port survives a restart)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class StartFailed(RuntimeError):
    """The child exited (or never got ready); carries its exit code and the tail of its log."""

    def __init__(self, message: str, *, returncode: int | None, log_tail: str) -> None:
        super().__init__(f"{message} (exit {returncode}): {log_tail[-1500:]}")
        self.returncode = returncode
        self.log_tail = log_tail


class SidecarProcess:
    """``rollout-sidecar serve`` on 127.0.0.1 with a given journal; restartable, killable.

    ``port=0`` binds an ephemeral port on every start (``url`` changes); a fixed port keeps it.
    The child's log goes to ``log_path`` (default: beside the journal). ``cwd`` (exec only) is
    where the child starts and what it imports from (``python -m`` puts it first on the path):
    another build's unpacked packages, or this repository by default.
    """

    def __init__(
        self,
        journal: Path,
        log_path: Path | None = None,
        *,
        port: int = 0,
        launch: Launch = "exec",
        extra_args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        log_level: str = "info",
        cwd: Path | None = None,
    ) -> None:
        self.journal = journal
        self.log_path = log_path if log_path is not None else journal.with_name(journal.name + ".log")
        self.log_level = log_level
        self.port = port
        self.launch = launch
        self.extra_args = list(extra_args)
        self.env = env
        self.cwd = cwd if cwd is not None else REPO_ROOT
        self.url = ""
        self.pid: int | None = None
        self.starts = 0
        self._popen: subprocess.Popen[bytes] | None = None

    def argv(self) -> list[str]:
        return [
            "serve",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--journal",
            str(self.journal),
            "--log-level",
            self.log_level,
            *self.extra_args,
        ]

    # -- lifecycle ------------------------------------------------------------------------

    def spawn(self) -> None:
        """Start the child without waiting (see :meth:`wait_ready`)."""
        if self.pid is not None:
            raise RuntimeError(f"sidecar already running as pid {self.pid}")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        # A fork copies the locks other threads hold (a finished test's leftover threads in this
        # worker) and the child would wait on them for ever: fork only a single-threaded process.
        if self.launch == "exec" or threading.active_count() > 1:
            env = {**os.environ, "PYTHONPATH": str(self.cwd), **(self.env or {})}
            with self.log_path.open("ab") as log:
                self._popen = subprocess.Popen(
                    [sys.executable, "-m", "sidecar.cli", *self.argv()],
                    cwd=self.cwd,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                )
            self.pid = self._popen.pid
        else:
            self.pid = _fork_cli(self.argv(), self.log_path, self.env or {})
        self.starts += 1

    def wait_ready(self, timeout: float = 30.0) -> str:
        """Wait for the bound port and ``/readyz``; raises :class:`StartFailed` if the child exits."""
        deadline = time.monotonic() + timeout
        port = self.port
        while time.monotonic() < deadline:
            code = self.poll()
            if code is not None:
                raise StartFailed("sidecar exited during start", returncode=code, log_tail=self.log_since())
            if not port:
                found = _BOUND.search(self.log_since().encode())
                port = int(found.group(1)) if found else 0
            if port:
                url = f"http://127.0.0.1:{port}"
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{url}/readyz", timeout=1.0).status_code == 200:
                        self.url = url
                        return url
            time.sleep(0.02)
        self.kill()
        raise StartFailed(f"sidecar not ready within {timeout} s", returncode=None, log_tail=self.log_since())

    def start(self, timeout: float = 30.0) -> str:
        self.spawn()
        return self.wait_ready(timeout)

    def run_to_exit(self, timeout: float = 30.0) -> int:
        """Start and wait for the child to exit by itself (a start that must be refused)."""
        self.spawn()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.poll()
            if code is not None:
                return code
            time.sleep(0.02)
        self.kill()
        raise TimeoutError(f"sidecar did not exit within {timeout} s: {self.log_since()[-1500:]}")

    def poll(self) -> int | None:
        """The exit code once the child has exited (reaped), else None."""
        if self.pid is None:
            return None
        if self._popen is not None:
            code = self._popen.poll()
        else:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            code = None if done == 0 else os.waitstatus_to_exitcode(status)
        if code is not None:
            self.pid = None
            self._popen = None
            self._last_code = code
        return code

    def kill(self) -> None:
        """SIGKILL, no grace: whatever is in flight is cut at an arbitrary instruction."""
        self._signal_and_reap(signal.SIGKILL, 10.0)

    def freeze_and_list_descendants(self) -> list[int]:
        """SIGSTOP the service (so it cannot spawn more) and list its descendants; the caller kills it."""
        if self.pid is None:
            return []
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGSTOP)
        return descendants(self.pid)

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM (graceful: drain queued events, close the journal); SIGKILL after ``timeout``.
        Returns the exit code (``None`` when it was not running)."""
        if self.pid is None:
            return None
        try:
            self._signal_and_reap(signal.SIGTERM, timeout)
        except TimeoutError:
            self.kill()
        return self._last_code

    def _signal_and_reap(self, sig: int, timeout: float) -> None:
        pid = self.pid
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"sidecar pid {pid} still alive {timeout} s after signal {sig}")
            time.sleep(0.005)
        self.url = ""

    def log_since(self) -> str:
        """The child's log lines written since the last start."""
        try:
            with self.log_path.open("rb") as handle:
                handle.seek(getattr(self, "_log_offset", 0))
                return handle.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _die_with_parent() -> None:
    """``prctl(PR_SET_PDEATHSIG, SIGKILL)`` where available (Linux): no orphaned services."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)


def _fork_cli(argv: list[str], log_path: Path, env: dict[str, str]) -> int:
    """Fork; the child runs ``rollout-sidecar <argv>`` with stdout/stderr on ``log_path``."""
    log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    # Die with the parent when it is the main thread that forks (a worker thread's exit would
    # trigger it too early); otherwise the parent's stop()/kill() is the only cleanup.
    die_with_parent = threading.current_thread() is threading.main_thread()
    pid = os.fork()
    if pid:
        os.close(log_fd)
        return pid
    code = 1
    try:  # the child: never returns into the parent's code
        if die_with_parent:
            _die_with_parent()
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.environ.update(env)
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        from sidecar.cli import main

        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 - the child's own stderr
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115
        code = main(argv)
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stderr.flush()
        os._exit(code)
    raise AssertionError("unreachable")


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (read from ``/proc``; empty where there is none)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def reap_orphans(pids: list[int], grace_s: float = 3.0) -> list[int]:
    """Wait up to ``grace_s`` for ``pids`` (a killed service's children) to exit by themselves;
    SIGKILL and return the ones that did not."""
    deadline = time.monotonic() + grace_s
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [pid for pid in alive if _alive(pid)]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return alive


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
