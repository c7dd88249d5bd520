"""The fail-open worker: never blocks its caller, counts every drop, logs an outage twice."""

from __future__ import annotations

import threading
import time

from structlog.testing import capture_logs

from sidecar.export.failopen import FailOpenWorker


class TestFailOpenWorker:
    def test_a_hung_destination_fills_the_queue_and_submit_still_returns(self) -> None:
        results: list[str] = []
        release = threading.Event()
        worker = FailOpenWorker("hung", maxsize=2, on_result=results.append)
        started = threading.Event()

        def hang() -> None:
            started.set()
            release.wait(30)

        with capture_logs() as logs:
            worker.submit(hang)
            started.wait(10)
            assert [worker.submit(lambda: None) for _ in range(4)] == [True, True, False, False]
            assert results == ["queue_full", "queue_full"]
            assert worker.stop(0.05) is False  # abandoned, not waited for
            release.set()
            deadline = time.monotonic() + 10
            while worker.pending() and time.monotonic() < deadline:  # the two queued jobs run
                time.sleep(0.01)
        assert [entry["event"] for entry in logs] == [
            "push destination down: dropping until it answers",
            "push destination back",
        ]

    def test_an_outage_is_logged_once_and_its_end_once(self) -> None:
        results: list[str] = []
        worker = FailOpenWorker("flaky", on_result=results.append)
        done = threading.Event()

        def fail() -> None:
            raise ConnectionError("refused")

        with capture_logs() as logs:
            for _ in range(3):
                worker.submit(fail)
            worker.submit(lambda: None)
            worker.submit(done.set)
            done.wait(10)
            assert worker.stop(10)
        assert results == ["failed", "failed", "failed", "sent", "sent"]
        events = [(entry["event"], entry.get("dropped")) for entry in logs]
        assert events == [
            ("push destination down: dropping until it answers", None),
            ("push destination back", 3),
        ]
        assert "ConnectionError: refused" in logs[0]["error"]

    def test_skips_are_counted_and_nothing_is_submitted_after_stop(self) -> None:
        results: list[str] = []
        worker = FailOpenWorker("busy", on_result=results.append)
        worker.skip("busy")
        worker.skip("down")
        assert worker.stop(10)
        assert worker.submit(lambda: None) is False
        assert results == ["busy", "down"]
