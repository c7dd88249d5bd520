"""The service's configurable caps: each refusal names the cap and the option that raises it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import msgspec
import orjson

from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings


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

        from sidecar.journal._facts import decode_fact

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
        assert [run for run, _ in rows] == ["r", "s"]
        facts = [msgspec.structs.replace(decode_fact(payload), received_at=0.0) for _, payload in rows]
        assert facts[0] == facts[1] and facts[0].line_number == 1 and facts[0].seconds == 2.5
        assert live["r"]["quality_summary"] == live["s"]["quality_summary"]
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            assert client.get("/report", params={"run_id": "r"}).json() == live["r"]


def _events_in_journal(path: Path) -> int:
    import sqlite3

    with sqlite3.connect(path) as conn:
        (count,) = conn.execute("SELECT count(*) FROM events").fetchone()
    conn.close()
    return int(count)


class TestMaxRuns:
    def test_a_run_created_behind_a_leading_heartbeat_is_refused_at_the_cap(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, max_runs=1)
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            assert client.post("/v1/runs/a/events", json=[{"kind": "run_started"}]).status_code == 200
            beat = {"kind": "heartbeat", "task_index": 0}
            for batch in ([beat, {"kind": "run_started"}], [{"kind": "run_ended"}, {"kind": "run_started"}]):
                refused = client.post("/v1/runs/b/events", json=batch)
                assert refused.status_code == 429, refused.text
                assert refused.json()["error"] == "too_many_runs" and refused.json()["field"] == "run_id"
                assert "--max-runs" in refused.json()["detail"]
            held = client.post("/v1/runs/a/events", json=[beat, {"kind": "run_started", "generation": 1}])
            assert held.status_code == 200  # a held run's new generation creates nothing
            assert [run["run_id"] for run in client.get("/v1/runs").json()["runs"]] == ["a"]

    def test_fifty_concurrent_new_runs_against_a_cap_of_five_yield_exactly_five(self, tmp_path: Path) -> None:
        import asyncio

        settings = _settings(tmp_path, max_runs=5)

        async def race(url: str) -> list[int]:
            async with httpx.AsyncClient(base_url=url, timeout=60) as client:

                async def create(index: int) -> int:
                    body = [{"kind": "heartbeat", "task_index": 0}] * (index % 2) + [{"kind": "run_started"}]
                    return (await client.post(f"/v1/runs/run-{index}/events", json=body)).status_code

                return list(await asyncio.gather(*(create(index) for index in range(50))))

        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            before = _events_in_journal(settings.journal_path)
            statuses = asyncio.run(race(url))
            assert sorted(statuses) == [200] * 5 + [429] * 45
            assert len(client.get("/v1/runs").json()["runs"]) == 5
            assert _events_in_journal(settings.journal_path) == before + 5  # refused: nothing stored


class TestIdentityCap:
    """Every identity, explicit or read from a row or a line, of every kind and route, is capped."""

    LONG = "t" * 2_000_000

    def test_identities_inside_rows_and_lines_are_refused_naming_the_field(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path)  # the default cap: 1,024 characters
        long_row = {"_ng_task_index": self.LONG, "_ng_rollout_index": 0, "reward": 1.0}
        long_rollout = {"_ng_task_index": 1, "_ng_rollout_index": ["r" * 700, "r" * 700]}
        cases = [
            ({"kind": "completed", "row": long_row}, "events.0.row._ng_task_index"),
            ({"kind": "failed", "row": long_row}, "events.0.row._ng_task_index"),
            ({"kind": "drained", "row": long_row}, "events.0.row._ng_task_index"),
            ({"kind": "completed", "row": long_rollout}, "events.0.row._ng_rollout_index"),
            (
                {"kind": "completed", "line": orjson.dumps(long_row).decode(), "line_number": 1},
                "events.0.line._ng_task_index",
            ),
            ({"kind": "started", "task_index": "s" * 1025}, "events.0.task_index"),
            ({"kind": "failed", "row": {"_ng_task_index": {"a": "x" * 2000}}}, "events.0.row._ng_task_index"),
            ({"kind": "heartbeat", "task_index": 0, "rollout_index": "r" * 1025}, "events.0.rollout_index"),
        ]
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=60) as client:
            assert client.post("/v1/runs/r/events", json=[{"kind": "run_started"}]).status_code == 200
            before = _events_in_journal(settings.journal_path)
            for event, field in cases:
                for batch in ([event], [{"kind": "started", "task_index": 5}, event]):
                    answer = client.post("/v1/runs/r/events", content=json.dumps(batch))
                    expected = field.replace("events.0.", f"events.{len(batch) - 1}.")
                    assert answer.status_code == 422, (event["kind"], answer.text[:200])
                    assert answer.json()["field"] == expected
                    assert "--max-identity-chars" in answer.json()["detail"]
            line = client.post(
                "/v1/runs/r/lines", params={"line_number": 1}, content=orjson.dumps(long_row) + b"\n"
            )
            assert line.status_code == 422 and line.json()["field"] == "events.0.line._ng_task_index"
            plan = client.post("/v1/runs/p/events", json=[{"kind": "run_started", "plan": {"x" * 1025: 1}}])
            assert plan.status_code == 422 and plan.json()["field"] == "events.0.plan"
            assert _events_in_journal(settings.journal_path) == before  # nothing of any refused batch
            fine = {"_ng_task_index": "t" * 1024, "_ng_rollout_index": 0, "reward": 1.0}
            for kind in ("completed", "failed", "drained"):
                ok = client.post("/v1/runs/r/events", json=[{"kind": kind, "row": fine}])
                assert ok.status_code == 200, ok.text[:200]
            ok_line = client.post("/v1/runs/r/lines", params={"line_number": 2}, content=orjson.dumps(fine))
            assert ok_line.status_code == 200


class TestInflightCap:
    def test_starts_past_the_service_wide_cap_are_counted_untracked(self, tmp_path: Path) -> None:
        settings = _settings(tmp_path, max_inflight=3)
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            for run in ("a", "b"):
                starts = [{"kind": "run_started"}] + [{"kind": "started", "task_index": i} for i in range(2)]
                answer = client.post(f"/v1/runs/{run}/events", json=starts)
                assert [r["status"] for r in answer.json()["results"]] == ["accepted"] * 3
            bodies = {run: client.get(f"/v1/runs/{run}/inflight").json() for run in ("a", "b")}
            assert [(bodies[r]["count"], bodies[r]["untracked"]) for r in ("a", "b")] == [(2, 0), (1, 1)]
            metrics = client.get("/metrics").text
            assert 'rollout_sidecar_inflight_untracked_total{run_id="b"} 1.0' in metrics
            assert client.post("/v1/runs/a/events", json=[{"kind": "run_ended"}]).status_code == 200
            again = client.post("/v1/runs/b/events", json=[{"kind": "started", "task_index": 9}])
            assert again.status_code == 200  # a's two entries left with its end
            assert client.get("/v1/runs/b/inflight").json()["count"] == 2
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            body = client.get("/v1/runs/b/inflight").json()  # rebuilt from the journal: the same
            assert (body["count"], body["untracked"]) == (2, 1)
