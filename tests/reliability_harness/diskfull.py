"""Disk full and read-only journal: 503 with a clear error, nothing acknowledged that was not
stored, reads keep answering, and everything recovers when space (or write access) returns.

The real service (uvicorn on 127.0.0.1, real HTTP) runs in a thread of this process so the
test can turn the journal's own knobs while it serves: ``Journal.set_max_db_bytes`` (SQLite's
page cap, which fails a commit with ``SQLITE_FULL`` exactly as a full disk does) and
``Journal.set_read_only`` (``SQLITE_READONLY``, as a read-only filesystem does). Running as root,
a chmod would not stop the writer, so these knobs are the faithful way to inject the faults.
"""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from sidecar.http.app import create_app
from sidecar.http.service import Service
from sidecar.http.settings import ServiceSettings
from sidecar.journal import Journal

from .workload import batch_files, generate_run, journal_keys, report_files

__all__ = ["DiskFullResult", "JournalKnobService", "run_disk_full_trials"]


class JournalKnobService:
    """The service on an ephemeral loopback port, with its journal's fault knobs reachable."""

    def __init__(self, journal_path: Path) -> None:
        self.journal = Journal(journal_path)
        self.service = Service(ServiceSettings(port=0, journal_path=journal_path), journal=self.journal)
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: uvicorn.Server | None = None
        self._thread = threading.Thread(target=self._run, name="knob-service", daemon=True)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        await self.service.start()
        config = uvicorn.Config(create_app(self.service), log_config=None, access_log=False, lifespan="on")
        self._server = uvicorn.Server(config)
        try:
            await self._server.serve(sockets=[self._sock])
        finally:
            await self.service.stop()

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Run ``coro`` on the service's event loop and wait for it."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)

    def __enter__(self) -> JournalKnobService:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not (self._server is not None and self._server.started):
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("service did not start")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.should_exit = True
        self._thread.join(30)
        self._sock.close()


@dataclass
class DiskFullResult:
    trials: int = 0
    rejected_503: int = 0
    accepted_while_faulted: int = 0
    """Batches that still fit (free pages inside the capped file) and were stored."""
    reads_while_faulted: int = 0
    read_seconds: list[float] = field(default_factory=list)
    messages: set[str] = field(default_factory=set)
    violations: list[str] = field(default_factory=list)


_READS = ("/drain_margin?run_id={run}", "/metrics", "/healthz", "/report?run_id={run}")


def _read_while_faulted(client: httpx.Client, run_id: str, trial: str, result: DiskFullResult) -> None:
    """Every read answers 200 while the journal cannot store; their latency is kept."""
    for read in _READS:
        began = time.perf_counter()
        answer = client.get(read.format(run=run_id))
        result.read_seconds.append(time.perf_counter() - began)
        if answer.status_code != 200:
            result.violations.append(f"{trial}: GET {read} -> {answer.status_code} while faulted")
        result.reads_while_faulted += 1


def _check_stored(
    stored: set[str],
    keys: list[str],
    acked: list[str],
    refused: list[tuple[int, int]],
    trial: str,
    result: DiskFullResult,
) -> None:
    """Every acknowledged event stored, none of those answered 503, and some batch refused."""
    lost = [key for key in acked if key not in stored]
    if lost:
        result.violations.append(f"{trial}: {len(lost)} acknowledged event(s) not stored")
    leaked = [keys[i] for a, b in refused for i in range(a, b) if keys[i] in stored]
    if leaked:
        result.violations.append(f"{trial}: {len(leaked)} event(s) answered 503 were stored anyway")
    if not refused:
        result.violations.append(f"{trial}: the fault never refused a batch")


def _trial(index: int, workdir: Path, fault: str, rng: random.Random, result: DiskFullResult) -> None:
    run = generate_run(f"full-{index}", workdir / f"full-{index}" / "run", num_tasks=16, seed=300 + index)
    run.write_files()
    path = workdir / f"full-{index}" / "journal.sqlite3"
    split = rng.randint(2, len(run.events) // 2)
    keys = run.idempotency_keys()
    acked: list[str] = []
    refused: list[tuple[int, int]] = []
    with JournalKnobService(path) as svc, httpx.Client(base_url=svc.url, timeout=30) as client:
        post = f"/v1/runs/{run.run_id}/events"
        for start in range(0, split, 5):
            client.post(post, json=run.events[start : min(start + 5, split)]).raise_for_status()
            acked.extend(keys[start : min(start + 5, split)])
        if fault == "full":
            svc.call(svc.journal.set_max_db_bytes(1))  # freeze growth at the current size
        else:
            svc.call(svc.journal.set_read_only(True))
        position = split
        while position < len(run.events):
            size = rng.randint(1, 6)
            end = min(position + size, len(run.events))
            response = client.post(post, json=run.events[position:end])
            if response.status_code == 200:
                acked.extend(keys[position:end])
                result.accepted_while_faulted += 1
            elif response.status_code == 503:
                body = response.json()
                if body.get("error") != "journal_unavailable" or response.headers.get("retry-after") is None:
                    result.violations.append(f"{fault} {index}: 503 body {body}")
                result.messages.add(str(body.get("detail")).split("(", 1)[0].split(": ")[-1].strip())
                refused.append((position, end))
                result.rejected_503 += 1
            else:
                result.violations.append(
                    f"{fault} {index}: HTTP {response.status_code} {response.text[:200]}"
                )
            _read_while_faulted(client, run.run_id, f"{fault} {index}", result)
            position = end
        _check_stored(set(journal_keys(path)), keys, acked, refused, f"{fault} {index}", result)
        if fault == "full":
            svc.call(svc.journal.set_max_db_bytes(None))
        else:
            svc.call(svc.journal.set_read_only(False))
        for a, b in refused:  # the client retries once space returns
            response = client.post(post, json=run.events[a:b])
            if response.status_code != 200:
                result.violations.append(f"{fault} {index}: retry after recovery -> {response.status_code}")
        if sorted(journal_keys(path)) != sorted(keys):
            result.violations.append(f"{fault} {index}: journal does not hold every event exactly once")
        if report_files(client, run.run_id) != batch_files(run.run_dir):
            result.violations.append(f"{fault} {index}: report differs from the batch check after recovery")
    result.trials += 1


def run_disk_full_trials(trials: int, workdir: Path, *, seed: int = 4) -> DiskFullResult:
    """``trials`` disk-full trials and ``trials`` read-only trials (the fault strikes mid-run)."""
    rng = random.Random(seed)
    result = DiskFullResult()
    for index in range(trials):
        _trial(2 * index, workdir, "full", rng, result)
        _trial(2 * index + 1, workdir, "read-only", rng, result)
    return result
