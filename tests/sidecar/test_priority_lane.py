"""``GET /drain_margin`` answered in the protocol: the same answers as the app's route, in order."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import orjson
import pytest

from sidecar.http._priority_lane import PriorityLane
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings

#: Query strings a dispatcher (or anyone) may send: valid, refused, odd.
QUERIES = [
    "run_id=lane",
    "run_id=lane&configured=12.5",
    "run_id=lane&configured=",
    "run_id=lane&configured=null",
    "run_id=lane&configured=-1",
    "run_id=lane&configured=nan",
    "run_id=lane&configured=1e999",
    "run_id=lane&configured=abc",
    "run_id=nobody",
    "run_id=",
    "",
    "configured=3",
    "run_id=other&run_id=lane",
    "run_id=%6Cane",
    "run_id=l%C3%A4ne",
    "run_id=lane&extra=%FF%FE",
    "run_id=" + "x" * 5000,
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, PriorityLane]]:
    settings = ServiceSettings(journal_path=tmp_path_factory.mktemp("lane") / "j.sqlite3")
    thread = ServiceThread(settings)
    with thread as url:
        events: list[dict[str, object]] = [{"kind": "run_started"}]  # no budget: no clock in the body
        events += [{"kind": "latency", "op": "record", "seconds": float(s), "source": "t", "seq": s}
            for s in range(1, 40)]
        httpx.post(f"{url}/v1/runs/lane/events", json=events).raise_for_status()
        assert thread.service is not None
        lane = thread.service.connection_guard.priority_lane
        assert isinstance(lane, PriorityLane)
        yield url, lane


def _comparable(response: httpx.Response) -> tuple[int, bytes, list[tuple[str, str]]]:
    """Status, body and headers, without the values that differ by the moment (date, timing)."""
    headers = [
        (name, "" if name in ("date", "server-timing") else value)
        for name, value in response.headers.multi_items()
        if name != "connection"
    ]
    return response.status_code, response.content, headers


@pytest.mark.parametrize("query", QUERIES)
def test_the_lane_answers_as_the_app_route_does(served: tuple[str, PriorityLane], query: str) -> None:
    url, lane = served
    with httpx.Client(base_url=url) as client:
        before = lane.answered
        fast = client.get(f"/drain_margin?{query}")
        assert lane.answered == before + 1
        # ``Connection: close`` takes the app's route (the lane keeps connections alive only)
        routed = client.get(f"/drain_margin?{query}", headers={"connection": "close"})
        assert lane.answered == before + 1
    assert _comparable(fast) == _comparable(routed)
    assert fast.headers["content-type"] == "application/json"
    assert fast.headers["server-timing"].startswith("app;dur=")
    if fast.status_code == 200:
        body = orjson.loads(fast.content)
        assert body["run_id"] == "lane" and body["samples"] == 39
    else:
        assert set(orjson.loads(fast.content)) == {"error", "field", "detail"}


def test_answers_keep_the_connection_and_its_order(served: tuple[str, PriorityLane]) -> None:
    """Lane and app answers interleave on one keep-alive connection, each in its request's order,
    and a ``/drain_margin`` pipelined behind a slower request is answered after it, not before."""
    url, _ = served
    port = int(url.rsplit(":", 1)[1])
    ask = [
        b"GET /drain_margin?run_id=lane HTTP/1.1\r\nHost: s\r\n\r\n",
        b"GET /healthz HTTP/1.1\r\nHost: s\r\n\r\n",
        b"GET /report?run_id=lane HTTP/1.1\r\nHost: s\r\n\r\n",
        b"GET /drain_margin?run_id=lane&configured=7 HTTP/1.1\r\nHost: s\r\n\r\n",
        b"GET /drain_margin?run_id=nobody HTTP/1.1\r\nHost: s\r\nConnection: close\r\n\r\n",
    ]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(b"".join(ask))  # pipelined: all five in one write
        received = b""
        while chunk := sock.recv(65536):
            received += chunk
    bodies = []
    rest = received
    while rest:
        head, _, rest = rest.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(int(line[15:]) for line in lines if line.lower().startswith(b"content-length:"))
        bodies.append((int(lines[0].split()[1]), orjson.loads(rest[:length])))
        rest = rest[length:]
    assert [status for status, _ in bodies] == [200, 200, 200, 200, 404]
    assert bodies[0][1]["run_id"] == "lane" and bodies[0][1]["configured"] is None
    assert bodies[1][1] == {"status": "ok"}
    assert bodies[2][1]["run_id"] == "lane" and "latency" in bodies[2][1]
    assert bodies[3][1]["configured"] == 7
    assert bodies[4][1]["error"] == "unknown_run"


def test_other_methods_and_spellings_take_the_app_route(served: tuple[str, PriorityLane]) -> None:
    url, lane = served
    with httpx.Client(base_url=url) as client:
        before = lane.answered
        head = client.head("/drain_margin?run_id=lane")
        post = client.post("/drain_margin?run_id=lane", content=b"{}")
        encoded = client.get("/drain%5Fmargin?run_id=lane")
        assert lane.answered == before
        assert head.status_code == 200 and head.content == b""
        assert post.status_code == 405 and orjson.loads(post.content)["error"] == "method_not_allowed"
        assert encoded.status_code == 200 and orjson.loads(encoded.content)["run_id"] == "lane"
        bodied = client.request("GET", "/drain_margin?run_id=lane", content=b"ignored")
        assert lane.answered == before and bodied.status_code == 200


def test_a_failing_handler_is_the_apps_500() -> None:
    def broken(query: bytes) -> tuple[int, bytes, None]:
        raise RuntimeError(f"cannot answer {query!r}")

    lane = PriorityLane({b"/x": broken}, b'{"error":"internal"}')
    head, _, body = lane.response(broken, b"q=1", [(b"date", b"today")]).partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 500 Internal Server Error"
    assert lines[1:4] == [b"date: today", b"content-length: 20", b"content-type: application/json"]
    assert lines[4].startswith(b"server-timing: app;dur=")
    assert body == b'{"error":"internal"}' and lane.answered == 1


def test_refusal_headers_are_framed_before_the_body() -> None:
    lane = PriorityLane({}, b"{}")
    answer = lane.response(lambda q: (503, b'{"a":1}', {"Retry-After": "1"}), b"", [])
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[:4] == [
        b"HTTP/1.1 503 Service Unavailable",
        b"retry-after: 1",
        b"content-length: 7",
        b"content-type: application/json",
    ]
    assert body == b'{"a":1}'
