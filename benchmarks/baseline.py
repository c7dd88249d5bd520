"""What the benchmarks share: another commit's packages to run beside ours (``git archive``), the
service in its own process, a poller of its ``/drain_margin``, generated rows, quantiles, verdicts.
Heavier imports are made where used, so importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import subprocess
import tarfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import fields
from io import BytesIO
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

if TYPE_CHECKING:
    from tests.reliability_harness.sidecar_process import SidecarProcess

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("sidecar", "health", "dispatcher_client")
MB = 1 << 20
Window = tuple[float, float]


def unpack_baseline(ref: str, into: Path) -> Path:
    """Our packages at commit ``ref``, extracted under ``into``; returns ``into``."""
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", ref, *PACKAGES],
        check=True,
        capture_output=True,
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``: the value at rank ``floor(q * n)`` of the sorted
    sample, so ``q=0.99`` of 100 values is the largest, never an interpolation (nan if empty)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def verdict(name: str, value: float, limit: float, unit: str = "") -> bool:
    """Print ``PASS``/``FAIL`` for one target (``value <= limit``) and return whether it held."""
    held = value <= limit
    print(f"  {'PASS' if held else 'FAIL'}  {name}: {value:.4g}{unit} (target <= {limit:.4g}{unit})")
    return held


# -- the service under load -----------------------------------------------------------------------


def connect(url: str, timeout: float = 300.0) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=timeout)


def request(
    conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None = None
) -> tuple[int, bytes]:
    conn.request(method, path, body=body, headers={"content-type": "application/json"})
    answer = conn.getresponse()
    return answer.status, answer.read()


def generated_rows(
    seed: int, count: int, *, calls: int, payload: int, invalid: bool = False
) -> list[dict[str, Any]]:
    """Generated result rows; ``invalid``: each fails the contract by one field of one model call
    (an unknown key or a negative duration: the demo's ``invalid_trajectory`` fault)."""
    from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, generate_rows

    faults = FaultRates(**{f.name: 0.0 for f in fields(FaultRates)} | {"invalid_trajectory": float(invalid)})
    config = SyntheticConfig(
        num_tasks=count,
        repeats_per_task=1,
        model_calls_per_rollout=calls,
        payload_bytes_per_call=payload,
        faults=faults,
    )
    return list(itertools.islice(generate_rows(config, seed), count))


def completed_event(row: dict[str, Any], task: int, source: str, seq: int) -> dict[str, Any]:
    row = {**row, "_ng_task_index": task, "_ng_rollout_index": 0}
    return {
        "kind": "completed",
        "seconds": 1.0 + task % 50,
        "row": row,
        "source": source,
        "seq": seq,
        "at": time.time(),
    }


def preload(url: str, run: str, first_task: int, count: int, batch: int = 500) -> int:
    """``count`` small completions in ``batch``-event bodies, as fast as the service takes them."""
    pool = generated_rows(first_task, 64, calls=2, payload=256)
    conn = connect(url)
    for start in range(first_task, first_task + count, batch):
        body = orjson.dumps(
            [
                completed_event(pool[i % 64], i, f"pre{first_task}", i)
                for i in range(start, min(start + batch, first_task + count))
            ]
        )
        status, answer = request(conn, "POST", f"/v1/runs/{run}/events", body)
        assert status == 200, answer[:300]
    return count


class Poller:
    """``GET /drain_margin`` every ``every`` s in a thread: (send time, latency) of each poll."""

    def __init__(self, url: str, run: str, every: float = 0.005) -> None:
        self.url, self.path, self.every = url, f"/drain_margin?run_id={run}", every
        self.samples: list[tuple[float, float]] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        conn = connect(self.url, timeout=60)
        while not self._stop.is_set():
            start = time.perf_counter()
            status, _ = request(conn, "GET", self.path)
            self.samples.append((start, time.perf_counter() - start))
            self.failures += status != 200
            self._stop.wait(self.every)

    def __enter__(self) -> Poller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def within(self, window: Window) -> list[float]:
        return [latency for start, latency in self.samples if window[0] <= start <= window[1]]


def ms(values: list[float]) -> str:
    return (
        f"p50 {quantile(values, 0.5) * 1e3:.2f} p99 {quantile(values, 0.99) * 1e3:.2f} "
        f"max {max(values, default=float('nan')) * 1e3:.1f} ms (n={len(values)})"
    )


@contextlib.contextmanager
def service(
    workdir: Path, name: str, *extra: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> Iterator[SidecarProcess]:
    """``rollout-sidecar serve`` on 127.0.0.1 with the journal ``name`` (``cwd``: another build's
    packages), stopped on exit."""
    from tests.reliability_harness.sidecar_process import SidecarProcess, free_port

    sidecar = SidecarProcess(
        workdir / f"{name}.sqlite3",
        workdir / f"{name}.log",
        extra_args=list(extra),
        port=free_port(),
        log_level="warning",
        env=env,
        cwd=cwd,
    )
    sidecar.start(timeout=120)
    try:
        yield sidecar
    finally:
        sidecar.stop()


@contextlib.contextmanager
def polled(
    workdir: Path, run: str, *extra: str, every: float = 0.005, env: dict[str, str] | None = None
) -> Iterator[tuple[SidecarProcess, Poller]]:
    """:func:`service` with ``run`` started and its ``/drain_margin`` polled."""
    with service(workdir, run, *extra, env=env) as sidecar:
        start_run(sidecar.url, run)
        with Poller(sidecar.url, run, every) as poller:
            yield sidecar, poller


def start_run(url: str, run: str) -> None:
    status, answer = request(connect(url), "POST", f"/v1/runs/{run}/events", b'[{"kind":"run_started"}]')
    assert status == 200, answer[:300]


def reset_peak(pid: int) -> int:
    """Reset ``VmHWM`` to ``VmRSS`` (``/proc/PID/clear_refs``); returns that RSS."""
    from tests.reliability_harness.proc_stats import resident_bytes

    Path(f"/proc/{pid}/clear_refs").write_text("5")
    return resident_bytes(pid)
