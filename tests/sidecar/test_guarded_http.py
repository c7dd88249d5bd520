"""The HTTP protocol's body holder: chunks joined once, and bodies that arrive in pieces intact."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import orjson

from sidecar._guarded_http import BodyChunks
from sidecar.server import ServiceThread
from sidecar.settings import ServiceSettings

from .service_support import generate_run


class TestBodyChunks:
    def test_one_chunk_is_handed_on_uncopied(self) -> None:
        chunk = b"x" * 100_000
        held = BodyChunks()
        held += chunk
        assert len(held) == 100_000 and held
        assert bytes(held) is chunk

    def test_chunks_are_joined_in_order(self) -> None:
        held = BodyChunks()
        assert not held and bytes(held) == b""
        for part in (b"ab", b"", b"cde", b"f"):
            held += part
        assert len(held) == 6
        assert bytes(held) == b"abcdef"


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
