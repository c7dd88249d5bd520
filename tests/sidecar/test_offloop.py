"""``sidecar.http.offloop``: reads built from a cut take turns and step aside for ingest."""

from __future__ import annotations

import asyncio
import threading

import pytest

from health.process_tuning import yield_point
from sidecar.http.offloop import OffLoopReads


def test_a_build_steps_aside_while_ingest_is_busy_and_goes_on_after() -> None:
    answers = iter([True, True, True, False])
    polled: list[bool] = []

    def busy() -> bool:
        polled.append(next(answers, False))
        return polled[-1]

    reads = OffLoopReads(asyncio.Lock(), busy=busy)
    reads._step_aside()
    assert polled == [True, True, True, False]


@pytest.mark.asyncio
async def test_builds_from_a_cut_take_turns_one_at_a_time() -> None:
    reads = OffLoopReads(asyncio.Lock(), busy=lambda: False)
    running: list[int] = []
    most = 0
    lock = threading.Lock()

    def make(cut: int) -> int:
        nonlocal most
        with lock:
            running.append(cut)
            most = max(most, len(running))
        yield_point()  # (calls the build's pause: not busy, returns)
        with lock:
            running.remove(cut)
        return cut * 2

    results = await asyncio.gather(*(reads.build_from_cut(lambda n=n: n, make) for n in range(4)))
    assert results == [0, 2, 4, 6]
    assert most == 1
    assert reads.builds == 4
