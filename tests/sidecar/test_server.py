"""``rollout-sidecar serve`` as a process: graceful SIGTERM, restart from the journal, refusals."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import orjson
import pytest

from sidecar.cli import main as cli_main
from sidecar.journal import Journal
from tests.reliability_harness.sidecar_process import SidecarProcess, free_port


class TestServeProcess:
    def test_sigterm_is_graceful_and_restart_replays(self, tmp_path: Path) -> None:
        journal = tmp_path / "state" / "journal.sqlite3"
        events = [{"kind": "run_started", "plan": {"0": 2}}] + [
            {"kind": "completed", "seconds": 10.0 + i, "row": {"_ng_task_index": 0, "_ng_rollout_index": i}}
            for i in range(2)
        ]
        sidecar = SidecarProcess(journal, tmp_path / "serve.log")
        with sidecar as url:
            assert httpx.post(f"{url}/v1/runs/p/events", json=events).status_code == 200
            before = httpx.get(f"{url}/report/quality_summary.json", params={"run_id": "p"}).content
            assert sidecar.stop(30) == 0  # SIGTERM
            logs = sidecar.log_since()
        assert '"event": "service stopped"' in logs or "service stopped" in logs
        assert list(Journal(tmp_path / "state" / "journal.sqlite3").snapshots())
        with sidecar as url:
            assert httpx.get(f"{url}/readyz").json()["replayed"] == 0  # all 3 are in the shutdown snapshot
            assert httpx.get(f"{url}/report/quality_summary.json", params={"run_id": "p"}).content == before
            out = tmp_path / "out"
            assert cli_main(["report", "--sidecar", url, "--run-id", "p", "--out", str(out)]) == 0
            assert (out / "quality_summary.json").read_bytes() == before

    def test_a_file_that_is_not_a_journal_is_refused(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        bogus = tmp_path / "journal.sqlite3"
        bogus.write_bytes(b"this is not an SQLite database" * 100)
        assert cli_main(["serve", "--port", str(free_port()), "--journal", str(bogus)]) == 2
        assert "rollout-sidecar serve:" in capsys.readouterr().err
        assert bogus.read_bytes().startswith(b"this is not")

    def test_a_journal_of_another_state_schema_is_refused_in_one_line(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        import asyncio

        from sidecar.journal import Journal

        path = tmp_path / "journal.sqlite3"

        async def stamp() -> None:
            journal = Journal(path)
            await journal.open()
            await journal.set_meta("state_schema", b"facts-99/health-1")
            await journal.close()

        asyncio.run(stamp())
        port = free_port()
        assert cli_main(["serve", "--port", str(port), "--journal", str(path)]) == 2
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and "facts-99/health-1" in lines[0] and "new journal path" in lines[0]
        with socket.socket() as again:  # the port and the journal were released
            again.bind(("127.0.0.1", port))
        assert cli_main(["serve", "--port", str(port), "--journal", str(path)]) == 2

    def test_report_from_an_unreachable_sidecar(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        url = f"http://127.0.0.1:{free_port()}"
        assert cli_main(["report", "--sidecar", url, "--run-id", "x", "--out", str(tmp_path / "o")]) == 2
        assert "cannot fetch the report" in capsys.readouterr().err


class TestListeningLog:
    def test_port_zero_logs_the_port_actually_bound(self, tmp_path: Path) -> None:
        cmd = [sys.executable, "-m", "sidecar.cli", "serve", "--port", "0", "--journal", str(tmp_path / "j")]
        process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            deadline = time.monotonic() + 30
            assert process.stderr is not None
            while time.monotonic() < deadline:
                line = process.stderr.readline().decode()
                if '"listening"' in line:
                    break
            else:
                raise AssertionError("no 'listening' line within 30 s")
            port = orjson.loads(line)["port"]
            assert port != 0
            assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        finally:
            process.kill()
            process.communicate(timeout=10)


class TestRequestBodies:
    @staticmethod
    def _post_in_pieces(port: int, body: bytes, pieces: list[bytes]) -> tuple[int, bytes]:
        """POST ``body``'s declared length, sending ``pieces`` apart so they arrive as chunks."""
        head = f"POST /v1/runs/b/events HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
        with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
            conn.sendall(head.encode())
            for piece in pieces:
                time.sleep(0.15)
                conn.sendall(piece)
            reply = b""
            while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
                data = conn.recv(65536)
                if not data:
                    break
                reply += data
        status = int(reply.split(b" ", 2)[1])
        return status, reply.partition(b"\r\n\r\n")[2]

    def test_a_body_in_one_chunk_or_in_many_is_read_whole(self, tmp_path: Path) -> None:
        from sidecar.http.server import ServiceThread
        from sidecar.http.settings import ServiceSettings

        settings = ServiceSettings(port=0, journal_path=tmp_path / "journal.sqlite3")
        rows = [{"_ng_task_index": index, "pad": "x" * 3000} for index in range(4)]
        with ServiceThread(settings) as url:
            port = int(url.rsplit(":", 1)[1])
            assert httpx.post(f"{url}/v1/runs/b/events", json=[{"kind": "run_started"}]).status_code == 200
            body = orjson.dumps([{"kind": "completed", "seconds": 1.0, "row": row} for row in rows[:2]])
            assert self._post_in_pieces(port, body, [body])[0] == 200
            body = orjson.dumps([{"kind": "completed", "seconds": 1.0, "row": row} for row in rows[2:]])
            status, reply = self._post_in_pieces(port, body, [body[:10], body[10:5000], body[5000:]])
            assert status == 200
            assert [r["status"] for r in orjson.loads(reply)["results"]] == ["accepted", "accepted"]
            report = httpx.get(f"{url}/v1/runs").json()["runs"]
            assert [run["run_id"] for run in report] == ["b"]
            # every row arrived whole: a retry of each is a duplicate, the content hash agrees
            again = httpx.post(
                f"{url}/v1/runs/b/events",
                json=[{"kind": "completed", "seconds": 1.0, "row": row} for row in rows],
            ).json()["results"]
            assert [r["status"] for r in again] == ["duplicate"] * 4


def test_serve_runs_with_a_raised_collector_threshold_and_restores_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The ``serve`` entry point owns the process's settings (health.process_tuning); the
    service itself (run_service) changes none of them."""
    import gc
    import sys

    from health import process_tuning
    from sidecar.cli import main
    from sidecar.http import server
    from sidecar.http.settings import ServiceSettings

    seen: list[tuple[object, ...]] = []

    async def fake_serve(settings: ServiceSettings, *, follower: object = None) -> None:
        seen.append((gc.get_threshold(), round(sys.getswitchinterval(), 6), process_tuning.owner()))

    before = (gc.get_threshold(), round(sys.getswitchinterval(), 6))
    monkeypatch.setattr(server, "serve", fake_serve)
    server.run_service(ServiceSettings(journal_path=tmp_path / "j.sqlite3"))
    assert seen == [(*before, None)]  # the library alone leaves the process's settings alone
    seen.clear()
    assert main(["serve", "--journal", str(tmp_path / "j.sqlite3")]) == 0  # the entry point
    threshold = (process_tuning.SERVE_GC_THRESHOLD, *before[0][1:])
    assert seen == [(threshold, min(before[1], process_tuning.SERVE_SWITCH_INTERVAL_S), "serve")]
    assert (gc.get_threshold(), round(sys.getswitchinterval(), 6)) == before
