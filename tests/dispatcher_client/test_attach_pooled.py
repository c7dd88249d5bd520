"""``RemoteLatencyTracker(pooled=True)`` (``attach --pooled``): several processes of one run answer
the run's p75 over all their samples, pooled in a real sidecar; never an average of their p75s."""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from dispatcher_client import RemoteLatencyTracker
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from sidecar.perf import DispatchLatencyTracker

MINE = [1.0, 2.0, 3.0, 4.0, 5.0]
THEIRS = [10.0, 20.0, 30.0, 40.0, 50.0, 60.0]


def _p75(samples: list[float]) -> float | None:
    tracker = DispatchLatencyTracker()
    for seconds in samples:
        tracker.record(seconds)
    return tracker.drain_margin(None)


def test_pooled_trackers_answer_the_p75_of_their_union(tmp_path: Path) -> None:
    thread = ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "journal.sqlite"))
    url = thread.start()
    try:
        a = RemoteLatencyTracker(url, run_id="pool", pooled=True, pooled_interval_s=0.02)
        b = RemoteLatencyTracker(url, run_id="pool", pooled=True, pooled_interval_s=0.02)
        assert a.drain_margin(None) is None  # nothing anywhere yet
        for seconds in MINE:
            a.record(seconds)
        for seconds in THEIRS:
            b.record(seconds)
        assert a.flush(30) and b.flush(30)
        deadline = time.monotonic() + 30  # the background poll picks the pool up by itself
        while a.pooled is None or a.pooled[1] < len(MINE + THEIRS):
            assert time.monotonic() < deadline, a.pooled
            time.sleep(0.01)
        b.refresh()
        union = _p75(MINE + THEIRS)
        assert a.drain_margin(None) == b.drain_margin(None) == union == 35.0
        assert union != statistics.mean([_p75(MINE) or 0.0, _p75(THEIRS) or 0.0])  # pooled, not averaged
        assert a.drain_margin(7.0) == 7.0  # a configured margin wins, as in NeMo Gym
    finally:
        thread.stop()
    for tracker in (a, b):  # the sidecar is gone: each answers from its own samples again
        tracker.refresh()
        assert tracker.pooled is None
        tracker.close(0.0)
    assert (a.drain_margin(None), b.drain_margin(None)) == (_p75(MINE), _p75(THEIRS)) == (4.0, 47.5)
