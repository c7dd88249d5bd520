"""Shared helpers: a real sidecar as a subprocess (so it can be stopped and restarted on the
same port and journal), and the batch health check's files for comparison."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from health import health_check_run_dir

__all__ = ["REPO_ROOT", "SidecarProcess", "batch_files", "free_port", "sidecar_files", "stable_report"]

REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class SidecarProcess:
    """``rollout-sidecar serve`` in a child process on a fixed port and journal."""

    def __init__(
        self,
        journal: Path,
        port: int | None = None,
        *,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.journal = journal
        self.port = port or free_port()
        self.extra_args = extra_args
        self.env = env or {}
        self.url = f"http://127.0.0.1:{self.port}"
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 20.0) -> str:
        cmd = [sys.executable, "-m", "sidecar.cli", "serve", "--port", str(self.port)]
        cmd += ["--journal", str(self.journal), "--log-level", "warning", *self.extra_args]
        env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), **self.env}
        self._proc = subprocess.Popen(
            cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                assert self._proc.stderr is not None
                raise RuntimeError(f"sidecar exited: {self._proc.stderr.read().decode()[-2000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/readyz", timeout=0.5).status_code == 200:
                    return self.url
            time.sleep(0.05)
        self.stop()
        raise TimeoutError(f"sidecar did not get ready within {timeout} s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc.stderr is not None:
            proc.stderr.close()
        self._proc = None

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def batch_files(run_dir: Path, rollouts_file: str | None = None) -> tuple[bytes, bytes]:
    """``quality_summary.json`` and ``rollout_verdicts.jsonl`` of the batch health check."""
    result = health_check_run_dir(run_dir, rollouts_file, workers=1)
    return result.summary_path.read_bytes(), result.verdicts_path.read_bytes()


def sidecar_files(url: str, run_id: str) -> tuple[bytes, bytes]:
    """The sidecar's byte-identical counterparts of :func:`batch_files`."""
    params = {"run_id": run_id}
    with httpx.Client(base_url=url, timeout=30) as client:
        summary = client.get("/report/quality_summary.json", params=params)
        verdicts = client.get("/report/verdicts", params=params)
    assert summary.status_code == 200, summary.text
    assert verdicts.status_code == 200, verdicts.text
    return summary.content, verdicts.content


def stable_report(body: dict[str, Any]) -> dict[str, Any]:
    """A report without what differs between two runs of the same events (ids, clocks)."""
    body = dict(body)
    for key in ("run_id", "started_at", "ended_at"):
        body.pop(key, None)
    body["latency"] = {k: v for k, v in body["latency"].items() if k != "completions_per_hour"}
    return body
