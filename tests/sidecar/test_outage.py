"""The shared outage log: once when an outage starts, once when it ends, drops counted between."""

from __future__ import annotations

import structlog
from structlog.testing import capture_logs

from sidecar.export.failopen import OutageLog


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def _outage(clock: _Clock) -> OutageLog:
    return OutageLog(
        structlog.get_logger("test"),
        down="dest down",
        back="dest back",
        stopped="dest stopped while down",
        clock=clock,
        endpoint="http://127.0.0.1:9",
    )


class TestOutageLog:
    def test_logs_once_at_the_start_and_once_at_the_end_with_duration_and_drops(self) -> None:
        clock = _Clock()
        outage = _outage(clock)
        with capture_logs() as logs:
            outage.sent()  # no outage: nothing to say
            outage.dropped()  # a skip outside an outage is not one
            outage.failed(error="ConnectionRefusedError: refused")
            clock.now += 2.5
            outage.failed(error="ConnectionRefusedError: again")
            outage.dropped()
            assert outage.down
            clock.now += 1.25
            outage.sent()
            outage.sent()
        assert not outage.down
        assert logs == [
            {
                "event": "dest down",
                "log_level": "warning",
                "endpoint": "http://127.0.0.1:9",
                "error": "ConnectionRefusedError: refused",
            },
            {
                "event": "dest back",
                "log_level": "info",
                "endpoint": "http://127.0.0.1:9",
                "outage_s": 3.75,
                "dropped": 3,
            },
        ]

    def test_a_second_outage_counts_from_zero(self) -> None:
        clock = _Clock()
        outage = _outage(clock)
        with capture_logs() as logs:
            outage.failed()
            outage.failed()
            outage.sent()
            outage.failed()
            clock.now += 1.0
            outage.sent()
        assert [(e["event"], e.get("dropped"), e.get("outage_s")) for e in logs] == [
            ("dest down", None, None),
            ("dest back", 2, 0.0),
            ("dest down", None, None),
            ("dest back", 1, 1.0),
        ]

    def test_close_during_an_outage_says_so_once_and_otherwise_nothing(self) -> None:
        clock = _Clock()
        outage = _outage(clock)
        with capture_logs() as logs:
            outage.close()
            outage.failed()
            clock.now += 0.5
            outage.close()
            outage.close()
        assert [(e["event"], e["log_level"], e.get("dropped"), e.get("outage_s")) for e in logs] == [
            ("dest down", "warning", None, None),
            ("dest stopped while down", "warning", 1, 0.5),
        ]
