"""What the demo's fake agent answers: a long-tailed duration and a row for each dispatch.

Result rows are the bundled sample run's (``sample_run/rollouts.jsonl``: every fault and verdict
represented), healthy ones four times in five, moved in time to end when the rollout ends and
stamped with its identity; failures are the rows NeMo Gym writes for a ``/run`` that raised or an
agent's timeout. The test suite's generator (``tests/sidecar/synthetic.py``) builds its failure
rows and durations with the same functions.
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any, Final

import orjson

from health.digest import digest_line

__all__ = [
    "TERMINAL_SHARE", "agent_reply", "failure_row", "gym_failure", "sample_task_seconds", "timeout_row",
]

JSON = dict[str, Any]
FAILURE_RATE: Final = 0.06
TERMINAL_SHARE: Final = 0.3
UNHEALTHY_SHARE: Final = 0.2
GYM_FAILURES: Final = (
    (500, "ClientResponseError", "500, message='Internal Server Error', url='http://agent:8000/run'"),
    (503, "ClientResponseError", "503, message='Service Unavailable', url='http://agent:8000/run'"),
    (None, "ServerDisconnectedError", "Server disconnected"),
)
_TIMES: Final = frozenset({"started_at", "completed_at", "timestamp", "created_at"})


def sample_task_seconds(rng: random.Random) -> float:
    """Seconds one rollout takes: lognormal body (median ~95 s); 6% are stragglers scaled by a
    Pareto(1.4) factor, which makes p95/p99 several times the median as in agentic runs. In [2 s, 4 h]."""
    seconds = rng.lognormvariate(math.log(95.0), 0.75)
    if rng.random() < 0.06:
        seconds *= rng.paretovariate(1.4)
    return min(max(seconds, 2.0), 4 * 3600.0)


def timeout_row(elapsed: float, terminal: bool) -> JSON:
    """The failure row Gym writes for a rollout its agent cut at the timeout."""
    reason = f"rollout exceeded its {round(elapsed)}s timeout"
    return {
        "reward": 0.0, "failure_reason": reason, "elapsed_seconds": round(elapsed, 3),
        "_ng_failure_class": "timeout_exceeded", "_ng_failure_terminal": terminal,
    }


def gym_failure(status: int | None, failure_type: str, message: str, body: str | None) -> JSON:
    """The failure keys Gym writes for a ``/run`` that raised: retryable when the agent was unreachable
    or busy (no status, 429, 502-504), else the agent's own error."""
    retryable = status in (None, 429, 502, 503, 504)
    return {
        "_ng_failure_class": "agent_request_failed" if retryable else "agent_run_error",
        "_ng_failure_type": failure_type, "_ng_failure_message": message,
        "_ng_failure_http_status": status, "_ng_failure_response_body": body,
    }


def _filler(rng: random.Random, length: int) -> str:
    return ("upstream error " * (length // 15 + 1))[:length]


def failure_row(
    rng: random.Random, elapsed: float, terminal: bool, text: Callable[[random.Random, int], str] = _filler
) -> JSON:
    """A failed attempt's row: Gym's own from a ``/run`` that raised (``text`` makes the answer's
    body), or the agent's timeout; a terminal failure is always the timeout."""
    if not terminal and rng.random() < 0.6:
        status, failure_type, message = rng.choice(GYM_FAILURES)
        body = None if status is None else text(rng, rng.randint(20, 1900))
        return gym_failure(status, failure_type, message, body)
    return timeout_row(elapsed, terminal)


@functools.cache
def _sample_rows() -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """The sample run's readable rows: the healthy ones and the others, by their digest's verdict."""
    data = resources.files("sidecar.demo").joinpath("sample_run/rollouts.jsonl").read_bytes()
    healthy: list[bytes] = []
    others: list[bytes] = []
    for number, line in enumerate(data.splitlines(), start=1):
        try:
            orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # the torn line: no row to answer with
        digest = digest_line(line, source_path="sample", source_index=0, line_number=number, ordinal=number)
        (healthy if digest.verdict == "healthy" else others).append(line)
    return tuple(healthy), tuple(others)


def _times(value: Any) -> Iterator[tuple[JSON, str]]:
    """Every ``(object, key)`` of a row that holds a time (Unix seconds)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in _TIMES and isinstance(item, float):
                yield value, key
            else:
                yield from _times(item)
    elif isinstance(value, list):
        for item in value:
            yield from _times(item)


def agent_reply(seed: int, task: int, rollout: int, started_at: float) -> tuple[float, JSON]:
    """The simulated seconds dispatch ``(task, rollout)`` takes from ``started_at``, and its row."""
    rng = random.Random(f"row:{seed}:{task}:{rollout}")
    seconds = sample_task_seconds(rng)
    if rng.random() < FAILURE_RATE:
        row = failure_row(rng, seconds, rng.random() < TERMINAL_SHARE)
    else:
        healthy, others = _sample_rows()
        row = orjson.loads(rng.choice(others if rng.random() < UNHEALTHY_SHARE else healthy))
        stamps = list(_times(row))
        if stamps:
            shift = started_at + seconds - max(holder[key] for holder, key in stamps)
            for holder, key in stamps:
                holder[key] += shift
        row.pop("_ng_attempt_index", None)
    return seconds, row | {"_ng_task_index": task, "_ng_rollout_index": rollout}
