"""``GET /v1/runs/{run_id}/timeline`` on the real service, and across a SIGKILL of its process."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from dispatcher_client.client import progress_event
from sidecar.http.json_bodies import dumps_json
from sidecar.http.server import ServiceThread
from sidecar.http.settings import Secret, ServiceSettings
from sidecar.ingest.engines import default_engines
from sidecar.ingest.ingestor import Ingestor
from sidecar.journal import Journal
from sidecar.state.timeline import MAX_POINTS
from tests.reliability_harness.sidecar_process import SidecarProcess

from .service_support import generate_run, post_events

pytestmark = pytest.mark.timeout(120)

RUN = "run-timeline"
SERIES = (
    "started", "completed", "failed", "drained", "in_flight", "stragglers", "rollouts_per_hour",
    "drain_margin_s", "seconds_left", "healthy", "unhealthy",
)  # fmt: skip


def _events(seed: int = 3, num_tasks: int = 24) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A run's ``run_started`` and its events, each completion preceded by its ``started``, all
    stamped on the simulated run's clock (as a dispatcher stamps them), its end too."""
    run = generate_run(num_tasks=num_tasks, repeats=2, seed=seed, duplicates=False)
    head = {"kind": "run_started", "plan": run.plan, "dispatch_budget_s": 600.0, "task_timeout_s": 0.4}
    head["started_at"] = run.started_at
    events: list[dict[str, Any]] = []
    for event in run.events:
        row, at = event.get("row"), event.get("at")
        start = None
        if isinstance(row, dict) and at is not None:
            start = progress_event("started", row, at - (event.get("seconds") or 0.0))
        events.extend([start, event] if start is not None else [event])
    last = max(event.get("at", 0.0) for event in events)
    events.append({"kind": "run_ended", "ended_at": last + 1.0})
    return head, events


def _spread(client: httpx.Client, events: list[dict[str, Any]], *, pause_s: float) -> None:
    """Post in small batches with pauses, so the run spans several one-second points."""
    for start in range(0, len(events), 8):
        post_events(client, RUN, events[start : start + 8])
        time.sleep(pause_s)


def _timeline(client: httpx.Client, run_id: str = RUN) -> bytes:
    response = client.get(f"/v1/runs/{run_id}/timeline")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    return response.content


def _rebuilt(journal: Path, *, snapshots: bool = False) -> bytes:
    """The timeline an independent rebuild of ``journal`` (read-only) gives, as the route writes it."""
    ingestor = Ingestor(Journal(journal), default_engines(), snapshots=snapshots)
    ingestor.replay()
    return dumps_json(ingestor.runs[RUN].timeline_body())


class TestRoute:
    def test_the_body_has_the_documented_shape_needs_no_token_and_freezes_at_the_end(
        self, tmp_path: Path
    ) -> None:
        settings = ServiceSettings(port=0, journal_path=tmp_path / "journal.sqlite3", token=Secret("s3cret"))
        head, events = _events()
        with ServiceThread(settings) as url:
            writer = httpx.Client(base_url=url, timeout=30, headers={"authorization": "Bearer s3cret"})
            reader = httpx.Client(base_url=url, timeout=30)  # reads need no token
            with writer, reader:
                post_events(writer, RUN, [head])
                fresh = orjson.loads(_timeline(reader))
                assert fresh["t"] == [fresh["started_at"]] and fresh["series"]["completed"] == [0]
                _spread(writer, events[: len(events) // 2], pause_s=0.1)
                body = orjson.loads(_timeline(reader))
                assert set(body) == {
                    "run_id", "status", "frozen", "bucket_s", "max_points", "started_at", "ended_at", "t",
                    "series",
                }  # fmt: skip
                assert (body["run_id"], body["status"], body["frozen"]) == (RUN, "running", False)
                assert body["max_points"] == MAX_POINTS and body["bucket_s"] == 1.0
                assert body["ended_at"] is None and isinstance(body["started_at"], float)
                assert tuple(body["series"]) == SERIES
                points = len(body["t"])
                assert points >= 3 and all(len(values) == points for values in body["series"].values())
                assert body["t"] == sorted(body["t"]) and body["t"][0] > body["started_at"]
                report = reader.get("/report", params={"run_id": RUN}).json()
                timed = [e for e in events[: len(events) // 2] if e["kind"] == "completed" and "at" in e]
                assert sum(body["series"]["completed"]) == len(timed) > 0  # torn lines have no time
                assert report["events"]["completed"] > len(timed)
                assert body["series"]["drain_margin_s"][-1] == report["latency"]["drain_margin"]
                assert body["series"]["seconds_left"][0] < 600.0

                _spread(writer, events[len(events) // 2 :], pause_s=0.0)
                ended = _timeline(reader)
                body = orjson.loads(ended)
                assert (body["status"], body["frozen"]) == ("ended", True)
                assert body["t"][-1] == body["ended_at"]  # the run's stamped end
                post_events(
                    writer, RUN, [{"kind": "completed", "seconds": 1.0, "row": {"_ng_task_index": 0}}]
                )
                assert _timeline(reader) == ended  # frozen

    def test_an_unknown_run_is_a_json_404_naming_the_run_id(self, tmp_path: Path) -> None:
        settings = ServiceSettings(port=0, journal_path=tmp_path / "journal.sqlite3")
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            response = client.get("/v1/runs/no-such-run/timeline")
            assert response.status_code == 404
            assert response.json() == {
                "error": "unknown_run",
                "field": "run_id",
                "detail": "unknown run 'no-such-run'",
            }
            assert client.post("/v1/runs/x/timeline").status_code == 405
            for hostile in ("%2E%2E", "a%00b", "%3Cscript%3Ealert(1)%3C%2Fscript%3E", "é" * 300, "x" * 5000):
                response = client.get(f"/v1/runs/{hostile}/timeline")
                assert response.status_code in (400, 404), (hostile[:20], response.text[:200])
                assert set(response.json()) == {"error", "field", "detail"}


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[SidecarProcess]:
    process = SidecarProcess(tmp_path / "state" / "journal.sqlite3", launch="exec")
    try:
        yield process
    finally:
        process.stop()


class TestSigkill:
    def test_a_killed_sidecar_answers_the_same_bytes_after_a_restart(self, sidecar: SidecarProcess) -> None:
        head, events = _events()
        half = len(events) // 2
        with httpx.Client(base_url=sidecar.start(), timeout=30) as client:
            post_events(client, RUN, [head])
            _spread(client, events[:half], pause_s=0.3)
            before = _timeline(client)
        sidecar.kill()  # mid-run: no run_ended, no clean shutdown
        with httpx.Client(base_url=sidecar.start(), timeout=30) as client:
            after = _timeline(client)
            assert after == before
            assert _rebuilt(sidecar.journal) == after
            _spread(client, events[half:], pause_s=0.05)
            ended = _timeline(client)
        sidecar.kill()
        with httpx.Client(base_url=sidecar.start(), timeout=30) as client:
            assert _timeline(client) == ended
        body = orjson.loads(ended)
        assert body["frozen"] and len(body["t"]) > len(orjson.loads(before)["t"])

    def test_killed_while_a_client_streams_and_snapshots_are_written(self, tmp_path: Path) -> None:
        sidecar = SidecarProcess(
            tmp_path / "state" / "journal.sqlite3",
            launch="exec",
            extra_args=("--snapshot-every-events", "9", "--snapshot-keep", "2"),
        )
        head, events = _events(seed=8, num_tasks=200)
        seen: list[bytes] = []
        try:
            url = sidecar.start()
            with httpx.Client(base_url=url, timeout=30) as client:
                post_events(client, RUN, [head])

            def stream() -> None:
                with httpx.Client(base_url=url, timeout=5) as streaming:
                    for start in range(0, len(events), 4):
                        try:
                            post_events(streaming, RUN, events[start : start + 4])
                            seen.append(_timeline(streaming))
                        except (httpx.HTTPError, AssertionError):
                            return  # the service was killed under us
                        time.sleep(0.05)

            streamer = threading.Thread(target=stream)
            streamer.start()
            deadline = time.monotonic() + 60
            while len(seen) < 5 and streamer.is_alive() and time.monotonic() < deadline:
                time.sleep(0.02)  # kill once a few batches are in, whatever the machine's speed
            sidecar.kill()
            streamer.join()
            assert 3 <= len(seen) < len(range(0, len(events), 4))  # killed mid-stream
            with httpx.Client(base_url=sidecar.start(), timeout=30) as client:
                after = _timeline(client)
            assert list(Journal(sidecar.journal).snapshots())
            assert _rebuilt(sidecar.journal, snapshots=True) == after
            # the points closed before the kill are the same after it (a point closes for good)
            last, now = orjson.loads(seen[-1]), orjson.loads(after)
            if last["bucket_s"] == now["bucket_s"]:
                closed = len(last["t"]) - 1
                assert now["t"][:closed] == last["t"][:closed]
                for name, values in last["series"].items():
                    assert now["series"][name][:closed] == values[:closed], name
        finally:
            sidecar.stop()
