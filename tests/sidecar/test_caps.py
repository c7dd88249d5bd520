"""The service's configurable caps: each refusal names the cap and the option that raises it."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

from sidecar.server import ServiceThread
from sidecar.settings import ServiceSettings


def _settings(tmp_path: Path, **caps: object) -> ServiceSettings:
    return ServiceSettings(port=0, journal_path=tmp_path / "journal.sqlite3", **caps)  # type: ignore[arg-type]


class TestCaps:
    def test_plan_tasks_identity_length_and_runs(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, max_plan_tasks=3, max_identity_chars=8, max_runs=2)
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            big_plan = client.post(
                "/v1/runs/a/events", json=[{"kind": "run_started", "plan": {str(t): 1 for t in range(4)}}]
            )
            assert big_plan.status_code == 422
            assert (
                big_plan.json()["field"] == "events.0.plan"
                and "--max-plan-tasks" in big_plan.json()["detail"]
            )
            assert (
                client.post("/v1/runs/a/events", json=[{"kind": "run_started", "plan": {"0": 1}}]).status_code
                == 200
            )
            long_id = client.post(
                "/v1/runs/a/events", json=[{"kind": "completed", "row": {}, "task_index": "x" * 9}]
            )
            assert long_id.status_code == 422 and long_id.json()["field"] == "events.0.task_index"
            assert "--max-identity-chars" in long_id.json()["detail"]
            assert client.post("/v1/runs/b/events", json=[{"kind": "run_started"}]).status_code == 200
            third = client.post("/v1/runs/c/events", json=[{"kind": "run_started"}])
            assert third.status_code == 429 and "--max-runs" in third.json()["detail"]
            assert (
                client.post("/v1/runs/a/events", json=[{"kind": "run_started"}]).status_code == 200
            )  # held run
            assert [run["run_id"] for run in client.get("/v1/runs").json()["runs"]] == ["a", "b"]

    def test_bodies_in_flight_past_the_cap_get_503_naming_it(self, tmp_path: Path) -> None:
        import socket

        settings = _settings(tmp_path, body_cap=4096, max_body_bytes_in_flight=6000)
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            assert client.post("/v1/runs/a/events", json=[{"kind": "run_started"}]).status_code == 200
            port = int(url.rsplit(":", 1)[1])
            with socket.create_connection(("127.0.0.1", port)) as held:  # 4000 bytes declared, 1 sent
                held.sendall(b"POST /v1/runs/a/events HTTP/1.1\r\nHost: x\r\nContent-Length: 4000\r\n\r\n[")
                busy = None
                for _ in range(100):  # until the held request has reserved its bytes
                    time.sleep(0.05)
                    busy = client.post("/v1/runs/a/events", content=b" " * 3000 + b'[{"kind":"run_ended"}]')
                    if busy.status_code == 503:
                        break
                assert busy is not None and busy.status_code == 503
                assert (
                    busy.json()["error"] == "busy" and "--max-body-bytes-in-flight" in busy.json()["detail"]
                )
                assert busy.headers["retry-after"] == "1"
            small = client.post("/v1/runs/a/events", json=[{"kind": "run_ended"}])
            for _ in range(100):  # the held request is released once its connection closes
                if small.status_code == 200:
                    break
                time.sleep(0.05)
                small = client.post("/v1/runs/a/events", json=[{"kind": "run_ended"}])
            assert small.status_code == 200


class TestRawLines:
    def test_a_raw_line_is_a_completion_and_bad_query_values_are_named(self, tmp_path: Path) -> None:
        with ServiceThread(_settings(tmp_path)) as url, httpx.Client(base_url=url, timeout=30) as client:
            assert client.post("/v1/runs/r/events", json=[{"kind": "run_started"}]).status_code == 200
            line = b'{"_ng_task_index": 0, "_ng_rollout_index": 0, "text": "\\"quoted\\""}'
            answer = client.post("/v1/runs/r/lines", params={"line_number": 1}, content=line)
            assert answer.status_code == 200 and answer.json()["results"][0]["status"] == "accepted"
            again = client.post("/v1/runs/r/lines", params={"line_number": 1}, content=line + b"\n")
            assert again.json()["results"][0]["status"] == "duplicate"  # the same line, newline or not
            assert client.get("/v1/runs").json()["runs"][0]["completed"] == 1
            missing = client.post("/v1/runs/r/lines", content=line)
            assert missing.status_code == 400 and missing.json()["field"] == "line_number"
            bad = client.post("/v1/runs/r/lines", params={"line_number": 2, "seconds": "soon"}, content=line)
            assert bad.status_code == 400 and bad.json()["field"] == "seconds"
            negative = client.post("/v1/runs/r/lines", params={"line_number": 2, "seconds": -1}, content=line)
            assert negative.status_code == 422 and negative.json()["field"] == "events.0.seconds"

    def test_a_raw_line_is_journaled_as_the_fact_an_event_line_makes(self, tmp_path: Path) -> None:
        import sqlite3

        from sidecar.journal._facts import decode_fact, is_legacy_payload

        settings = _settings(tmp_path)
        line = b'{"_ng_task_index": 1, "_ng_rollout_index": 0, "ng_trajectory": 5, "text": "caf\\u00e9"}'
        event = {"kind": "completed", "line": line.decode(), "line_number": 1, "seconds": 2.5}
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            for run in ("r", "s"):
                assert (
                    client.post(f"/v1/runs/{run}/events", json=[{"kind": "run_started"}]).status_code == 200
                )
            raw = client.post("/v1/runs/r/lines", params={"line_number": 1, "seconds": 2.5}, content=line)
            assert raw.status_code == 200
            assert client.post("/v1/runs/s/events", json=[event]).status_code == 200
            for run in ("r", "s"):
                assert client.post(f"/v1/runs/{run}/events", json=[{"kind": "run_ended"}]).status_code == 200
            live = {run: client.get("/report", params={"run_id": run}).json() for run in ("r", "s")}
        with sqlite3.connect(settings.journal_path) as conn:
            rows = conn.execute(
                "SELECT run_id, payload FROM events WHERE kind = 'completed' ORDER BY seq"
            ).fetchall()
        conn.close()
        assert [run for run, _ in rows] == ["r", "s"] and not any(is_legacy_payload(p) for _, p in rows)
        facts = [decode_fact(payload)._replace(received_at=0.0) for _, payload in rows]
        assert facts[0] == facts[1] and facts[0].line_number == 1 and facts[0].seconds == 2.5
        assert live["r"]["quality_summary"] == live["s"]["quality_summary"]
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            assert client.get("/report", params={"run_id": "r"}).json() == live["r"]
