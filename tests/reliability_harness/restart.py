"""Restart: the port answers while the journal replays; startup errors are one clear line.

A journal of a generated run (``num_tasks`` x 2 rollouts, every event of it) is written
directly; then ``rollout-sidecar serve`` is started over it and polled from the moment it is
spawned. ``/healthz`` must answer long before the replay ends, ``/readyz`` must answer 503 with
the replay's progress (never going back) until it answers 200, and ``/drain_margin`` must answer
(503 ``starting`` during the replay, 200 after) rather than refuse the connection. Then
``serve --port P`` on a port in use, and ``--journal`` under ``/proc``, must each exit 2 with one
stderr line naming the problem, without a traceback and without creating a journal.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from sidecar.ingest.engines import default_engines
from sidecar.ingest.events import EventBatch
from sidecar.ingest.ingestor import Ingestor
from sidecar.journal import Journal
from tests.reliability_harness.sidecar_process import REPO_ROOT, Launch, SidecarProcess, free_port
from tests.reliability_harness.workload import generate_run

__all__ = ["RestartResult", "run_restart", "write_journal"]


@dataclass
class RestartResult:
    events: int = 0
    healthz_s: float | None = None
    ready_s: float | None = None
    progress_polls: int = 0
    drain_margin_answers: int = 0
    startup_errors: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


def write_journal(path: Path, run_id: str, num_tasks: int) -> int:
    """A journal holding every event of a generated run (as the service would have stored it)."""
    run = generate_run(run_id, path.parent / "run", num_tasks=num_tasks, payload_bytes_per_call=64)
    events = [
        event
        for start in range(0, len(run.events), 5000)
        for event in EventBatch.validate_python(run.events[start : start + 5000])
    ]

    async def write() -> None:
        journal = Journal(path)
        await journal.open()
        ingestor = Ingestor(journal, default_engines())  # no snapshot: a restart replays it all
        ingestor.start()
        try:
            for start in range(0, len(events), 1000):
                await ingestor.submit(run_id, events[start : start + 1000])
        finally:
            await ingestor.stop()
            await journal.close()

    asyncio.run(write())
    return len(events)


def _startup_error(workdir: Path, name: str, args: list[str], result: RestartResult) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "sidecar.cli", "serve", *args],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    lines = [line for line in done.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    result.startup_errors[name] = lines[-1] if lines else ""
    if done.returncode != 2 or len(lines) != 1 or "Traceback" in done.stderr.decode("utf-8", "replace"):
        result.violations.append(f"{name}: exit {done.returncode}, stderr {lines[-5:]}")


def _check_start_order(result: RestartResult) -> None:
    """``/healthz`` answered before ready, and the replay's progress was seen more than once."""
    if result.healthz_s is None or result.ready_s is None or result.healthz_s >= result.ready_s:
        result.violations.append(f"/healthz first answered at {result.healthz_s}, ready at {result.ready_s}")
    if result.progress_polls < 2:
        result.violations.append(f"only {result.progress_polls} /readyz answers during the replay")


def _check_refused_starts(workdir: Path, result: RestartResult) -> None:
    """A busy port and an unwritable journal: refused at once, one stderr line, exit 2."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        taken = busy.getsockname()[1]
        fresh = workdir / "busy" / "journal.sqlite3"
        _startup_error(workdir, "busy port", ["--port", str(taken), "--journal", str(fresh)], result)
        if fresh.parent.exists():
            result.violations.append("busy port: a journal directory was created")
    _startup_error(
        workdir, "journal under /proc", ["--port", "0", "--journal", "/proc/nope/journal.sqlite3"], result
    )


def run_restart(workdir: Path, *, launch: Launch = "exec", num_tasks: int = 3000) -> RestartResult:
    """See the module docstring."""
    result = RestartResult()
    journal = workdir / "state" / "journal.sqlite3"
    journal.parent.mkdir(parents=True)
    result.events = write_journal(journal, "restart", num_tasks)
    port = free_port()
    sidecar = SidecarProcess(journal, workdir / "sidecar.log", port=port, launch=launch)
    url = f"http://127.0.0.1:{port}"
    began = time.monotonic()
    sidecar.spawn()
    last_progress = -1
    try:
        with httpx.Client(base_url=url, timeout=5) as client:
            while time.monotonic() - began < 600 and result.ready_s is None:
                if sidecar.poll() is not None:
                    result.violations.append(f"sidecar exited during replay: {sidecar.log_since()[-500:]}")
                    break
                try:
                    health = client.get("/healthz")
                except httpx.TransportError:
                    time.sleep(0.01)
                    continue
                if health.status_code == 200 and result.healthz_s is None:
                    result.healthz_s = time.monotonic() - began
                # /drain_margin first, /readyz second: readiness only ever goes from 503 to 200,
                # so a margin answered 200 before a /readyz that still says 503 is a real breach,
                # while the replay may end between the two requests in the other order
                margin = client.get("/drain_margin", params={"run_id": "restart"})
                ready = client.get("/readyz")
                result.drain_margin_answers += 1
                starting = margin.status_code == 503 and margin.json().get("error") == "starting"
                if ready.status_code == 200:
                    result.ready_s = time.monotonic() - began
                    if margin.status_code != 200 and not starting:
                        result.violations.append(f"/drain_margin around ready: {margin.status_code}")
                    break
                body = ready.json()
                if not starting:
                    result.violations.append(
                        f"/drain_margin during replay: {margin.status_code} {margin.text[:100]}"
                    )
                if ready.status_code != 503 or body.get("status") != "replaying" or "replayed" not in body:
                    result.violations.append(f"/readyz during replay: {ready.status_code} {body}")
                    continue
                result.progress_polls += 1
                if body["replayed"] < last_progress:
                    result.violations.append(
                        f"replay progress went back: {last_progress} -> {body['replayed']}"
                    )
                last_progress = body["replayed"]
                time.sleep(0.05)
            if result.ready_s is None:
                result.violations.append("never ready")
            elif client.get("/readyz").json().get("replayed") != result.events:
                result.violations.append("ready before replaying every event")
    finally:
        sidecar.stop()
    _check_start_order(result)
    _check_refused_starts(workdir, result)
    return result
