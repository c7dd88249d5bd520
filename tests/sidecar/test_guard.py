"""The connection guard beside uvicorn: bodies that arrive in pieces intact, a client that stops
reading a response dropped and its bytes freed."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import httpx
import orjson

from sidecar.http.guard import ConnectionGuard
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings

from .service_support import generate_run


def _post_in_pieces(port: int, path: str, body: bytes, pieces: int) -> tuple[int, bytes]:
    """A POST written in ``pieces`` parts with pauses, so the server reads it in several chunks."""
    head = (
        f"POST {path} HTTP/1.1\r\nHost: sidecar\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    step = -(-len(body) // pieces)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head)
        for start in range(0, len(body), step):
            time.sleep(0.02)
            sock.sendall(body[start : start + step])
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status_line, _, rest = answer.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


def test_bodies_sent_in_pieces_are_ingested_whole(tmp_path: Path) -> None:
    run = generate_run(num_tasks=6, repeats=2, payload_bytes_per_call=4096)
    settings = ServiceSettings(journal_path=tmp_path / "j.sqlite3")
    with ServiceThread(settings) as url:
        port = int(url.rsplit(":", 1)[1])
        start = orjson.dumps([{"kind": "run_started", "plan": run.plan}])
        assert _post_in_pieces(port, "/v1/runs/r/events", start, 1)[0] == 200
        body = orjson.dumps(run.events)
        assert len(body) > 100_000
        status, answer = _post_in_pieces(port, "/v1/runs/r/events", body, 7)
        assert status == 200, answer[:300]
        results = orjson.loads(answer)["results"]
        assert len(results) == len(run.events)
        assert all(result["status"] == "accepted" for result in results)
        # the same bytes in one piece: every event a duplicate of the one stored from pieces
        status, answer = _post_in_pieces(port, "/v1/runs/r/events", body, 1)
        assert status == 200
        assert [r["status"] for r in orjson.loads(answer)["results"]] == ["duplicate"] * len(run.events)


def _unsent_bytes(thread: ServiceThread) -> list[int]:
    """The write-buffer size of every connection the server holds (read from the test thread)."""
    server = thread._server
    assert server is not None
    for _ in range(10):  # the server's loop may change the set while it is copied
        try:
            held = list(server.server_state.connections)
            return [protocol.transport.get_write_buffer_size() for protocol in held]  # type: ignore[attr-defined]
        except RuntimeError:
            time.sleep(0.01)
    raise AssertionError("connections kept changing")


class TestWriteDeadline:
    def test_a_client_that_never_reads_a_large_report_is_dropped_and_its_bytes_freed(
        self, tmp_path: Path
    ) -> None:
        settings = ServiceSettings(journal_path=tmp_path / "j.sqlite3", write_timeout_s=1.0, port=0)
        thread = ServiceThread(settings)
        with thread as url:
            port = int(url.rsplit(":", 1)[1])
            with httpx.Client(base_url=url, timeout=60) as client:
                assert client.post("/v1/runs/r/events", json=[{"kind": "run_started"}]).status_code == 200
                for batch in range(4):  # ~8 MB of report: 8,000 tasks with 1,000-character ids
                    rows = [
                        {"kind": "completed", "row": {"_ng_task_index": f"{batch * 2000 + i:0>1000}"}}
                        for i in range(2000)
                    ]
                    assert client.post("/v1/runs/r/events", json=rows).status_code == 200
                size = len(client.get("/report", params={"run_id": "r"}).content)
            assert size > 8_000_000
            with socket.socket() as stuck:
                stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # and never read
                stuck.connect(("127.0.0.1", port))
                stuck.sendall(b"GET /report?run_id=r HTTP/1.1\r\nHost: sidecar\r\n\r\n")
                pinned = 0
                for _ in range(600):  # until the report sits in the server's write buffer
                    pinned = max(_unsent_bytes(thread), default=0)
                    if pinned > size // 2:
                        break
                    time.sleep(0.05)
                assert pinned > size // 2
                guard = thread.service.connection_guard if thread.service is not None else None
                assert guard is not None
                for _ in range(600):  # the deadline (1 s without the client reading) passes
                    if guard.counts.write_timeouts:
                        break
                    time.sleep(0.05)
                assert guard.counts.write_timeouts == 1
                assert _unsent_bytes(thread) == []  # the connection is gone, its buffer with it
                stuck.settimeout(30)
                received = 0
                try:  # what reached the client's buffers, then the end of the connection
                    while chunk := stuck.recv(65536):
                        received += len(chunk)
                except ConnectionResetError:
                    pass
                assert received < size
            with httpx.Client(base_url=url, timeout=60) as client:  # a client that reads still gets it
                assert len(client.get("/report", params={"run_id": "r"}).content) == size


class _Transport:
    """What the guard's sweep reads of an asyncio transport: its peer, and whether it closed it."""

    def __init__(self, port: int) -> None:
        self.port, self.closed = port, False

    def get_extra_info(self, name: str) -> object:
        return ("127.0.0.1", self.port) if name == "peername" else None

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0


class _Connection:
    def __init__(self, port: int) -> None:
        self.transport = _Transport(port)


def test_a_connection_just_accepted_outlives_a_burst_over_the_per_peer_cap() -> None:
    """Over ``max_per_peer`` the connections idle longest go; one accepted since the last sweep is
    spared until the next, even when a burst from its host arrived with it (it may not have sent
    its request yet: a dispatcher's poll beside a slowloris from the same host)."""
    now = [0.0]
    guard = ConnectionGuard(
        header_timeout_s=10, body_timeout_s=10, write_timeout_s=10, max_per_peer=3, clock=lambda: now[0]
    )
    burst = [_Connection(port) for port in range(1000, 1005)]
    guard.sweep(burst)
    assert not any(connection.transport.closed for connection in burst)  # all just accepted
    now[0] = 0.25
    poll = _Connection(2000)
    guard.sweep([*burst, poll])
    assert sum(connection.transport.closed for connection in burst) == 3  # 6 idle, 3 over the cap
    assert not poll.transport.closed
    now[0] = 0.5
    guard.sweep([*burst, poll])
    assert guard.counts.evicted == 3  # at the cap now: nobody else goes
