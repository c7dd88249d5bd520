"""Concurrent request bodies near the body cap: what they cost in memory, and what stays.

A real ``rollout-sidecar serve`` with a given body cap takes ``rounds`` rounds of ``concurrent``
``POST /events`` bodies at once, each one ``completed`` event whose ``line`` is a rollout row
just under the cap (a long output text). Figures: the service's peak resident memory growth
(``VmHWM``) over what it held before, as a multiple of one round's body bytes, and its resident
memory (``VmRSS``) a moment after the last answer, as growth over the same starting point. A
round of small bodies first warms threads and arenas, and the peak is reset before the big ones
(``/proc/PID/clear_refs``), so the figures count the bodies only.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

from tests.reliability_harness.proc_stats import peak_resident_bytes, resident_bytes
from tests.reliability_harness.sidecar_process import Launch, SidecarProcess

__all__ = ["BigBodiesResult", "run_big_bodies"]

RUN = "bodies"


@dataclass
class BigBodiesResult:
    body_bytes: int = 0
    concurrent: int = 0
    rounds: int = 0
    answers: list[int] = field(default_factory=list)
    peak_growth_bytes: int = 0
    after_growth_bytes: int = 0
    violations: list[str] = field(default_factory=list)

    @property
    def peak_ratio(self) -> float:
        """Peak growth over one round's body bytes."""
        return self.peak_growth_bytes / max(1, self.body_bytes * self.concurrent)


def _body(task: int, text_bytes: int) -> bytes:
    row = {
        "_ng_task_index": task,
        "_ng_rollout_index": 0,
        "reward": 1.0,
        "response": {
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "x" * text_bytes}]}]
        },
    }
    event = {"kind": "completed", "line": orjson.dumps(row).decode(), "line_number": task + 1}
    return orjson.dumps([event])


def _post_round(url: str, bodies: list[bytes]) -> list[int]:
    def post(body: bytes) -> int:
        with httpx.Client(base_url=url, timeout=300) as client:
            response = client.post(
                f"/v1/runs/{RUN}/events", content=body, headers={"content-type": "application/json"}
            )
            return response.status_code

    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(post, bodies))


def run_big_bodies(
    workdir: Path,
    *,
    launch: Launch = "exec",
    body_cap: int = 64 << 20,
    concurrent: int = 4,
    rounds: int = 2,
    settle_s: float = 2.0,
) -> BigBodiesResult:
    """See the module docstring. Every body must be accepted (200)."""
    result = BigBodiesResult(concurrent=concurrent, rounds=rounds)
    text_bytes = body_cap - (64 << 10)
    sidecar = SidecarProcess(
        workdir / "journal.sqlite3",
        workdir / "sidecar.log",
        launch=launch,
        extra_args=["--body-cap", str(body_cap), "--max-body-bytes-in-flight", str(body_cap * concurrent)],
    )
    url = sidecar.start(timeout=120)
    try:
        assert sidecar.pid is not None
        with httpx.Client(base_url=url, timeout=60) as client:
            started = client.post(f"/v1/runs/{RUN}/events", json=[{"kind": "run_started"}])
            if started.status_code != 200:
                result.violations.append(f"run_started answered {started.status_code}: {started.text[:200]}")
                return result
        warm = _post_round(url, [_body(10_000 + i, 1 << 16) for i in range(concurrent)])
        result.answers += warm
        time.sleep(settle_s)
        Path(f"/proc/{sidecar.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        before = resident_bytes(sidecar.pid)
        for round_number in range(rounds):
            bodies = [_body(round_number * concurrent + i, text_bytes) for i in range(concurrent)]
            result.body_bytes = len(bodies[0])
            result.answers += _post_round(url, bodies)
            del bodies
        time.sleep(settle_s)
        result.peak_growth_bytes = peak_resident_bytes(sidecar.pid) - before
        result.after_growth_bytes = resident_bytes(sidecar.pid) - before
    finally:
        sidecar.stop()
    refused = [status for status in result.answers if status != 200]
    if refused:
        result.violations.append(f"{len(refused)} bodies not accepted: {sorted(set(refused))}")
    return result
