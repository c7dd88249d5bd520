"""``started`` / ``heartbeat``, ``GET /v1/runs/{id}/inflight``, metrics, report: the real service."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from dispatcher_client.client import progress_event
from sidecar.cli import main as cli_main
from sidecar.http.app import create_app
from sidecar.http.server import ServiceThread
from sidecar.http.service import Service
from sidecar.http.settings import ServiceSettings
from sidecar.state.inflight import InflightRules

from .service_support import generate_run, post_events

RUN = "run-inflight"
TIMEOUT_S = 1.0
INTERVAL_S = 0.2


def _samples(text: str, run_id: str) -> dict[str, float]:
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.labels.get("run_id") == run_id and ("inflight" in sample.name or "straggler" in sample.name)
    }


def _inflight(client: httpx.Client, **params: Any) -> dict[str, Any]:
    response = client.get(f"/v1/runs/{RUN}/inflight", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def test_stragglers_are_flagged_listed_exported_and_survive_a_restart(tmp_path: Path) -> None:
    settings = ServiceSettings(
        port=0,
        journal_path=tmp_path / "journal.sqlite3",
        inflight=InflightRules(eval_interval_s=INTERVAL_S, stall_after_s=60.0),
    )
    run = generate_run(num_tasks=6, repeats=1, seed=3, failure_rate=0.0, fault_rate=0.0, drained_fraction=0.0)
    rows = [event["row"] for event in run.events]
    starts = [progress_event("started", row) for row in rows]
    with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        start = {"kind": "run_started", "plan": run.plan, "task_timeout_s": TIMEOUT_S}
        post_events(client, RUN, [start, *starts[:5], *run.events[:2]])
        results = post_events(client, RUN, [starts[0], starts[4]])
        assert [r["status"] for r in results] == ["duplicate", "duplicate"]

        body = _inflight(client)
        assert body["count"] == 3
        assert body["straggler_threshold_s"] == TIMEOUT_S
        assert [e["task_index"] for e in body["oldest"]] == [rows[i]["_ng_task_index"] for i in (2, 3, 4)]
        assert set(body["oldest"][0]) >= {"task_index", "rollout_index", "attempt", "age_s", "straggling"}
        assert "row" not in str(body["oldest"])  # identities and times, never payloads

        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            body = _inflight(client)
            for entry in body["oldest"]:
                assert entry["straggling"] == (entry["age_s"] > TIMEOUT_S)
                if entry["flagged_at"] is not None:  # never flagged before crossing the threshold
                    assert entry["flagged_at"] - entry["started_at"] > TIMEOUT_S
            if all(entry["flagged_at"] is not None for entry in body["oldest"]):
                break
            time.sleep(INTERVAL_S / 2)
        assert body["stragglers"] == 3
        assert body["flagged"]["stragglers"] == 3

        beats = client.post(
            f"/v1/runs/{RUN}/events",
            json=[
                {"kind": "heartbeat", "task_index": rows[2]["_ng_task_index"]},
                {"kind": "heartbeat", "task_index": 999},
            ],
        ).json()["results"]
        assert [r["status"] for r in beats] == ["accepted", "not_in_flight"]
        assert _inflight(client, limit=1)["oldest"][0]["last_heartbeat"] is not None

        metrics = _samples(client.get("/metrics").text, RUN)
        assert metrics["rollout_sidecar_inflight_rollouts"] == 3
        assert metrics["rollout_sidecar_inflight_stragglers"] == 3
        assert metrics["rollout_sidecar_inflight_stalled"] == 0
        assert metrics["rollout_sidecar_straggler_threshold_seconds"] == TIMEOUT_S
        assert metrics["rollout_sidecar_inflight_oldest_age_seconds"] > TIMEOUT_S
        before = _inflight(client, limit=10)

    with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        after = _inflight(client, limit=10)
        assert after["count"] == 3
        assert [(e["task_index"], e["started_at"]) for e in after["oldest"]] == [
            (e["task_index"], e["started_at"]) for e in before["oldest"]
        ]
        post_events(client, RUN, [run.events[2], {"kind": "run_ended"}])
        ended = _inflight(client)
        assert ended["ended"] is True
        assert ended["count"] == 2
        report = client.get("/report", params={"run_id": RUN}).json()
        assert report["inflight_at_end"]["count"] == 2
        assert [e["task_index"] for e in report["inflight_at_end"]["oldest"]] == [
            rows[i]["_ng_task_index"] for i in (3, 4)
        ]
        metrics = _samples(client.get("/metrics").text, RUN)
        assert metrics["rollout_sidecar_inflight_rollouts"] == 0  # an ended run has nothing in flight

    with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        again = client.get("/report", params={"run_id": RUN}).json()
        assert again["inflight_at_end"] == report["inflight_at_end"]


def test_bad_requests_name_the_field(tmp_path: Path) -> None:
    settings = ServiceSettings(port=0, journal_path=tmp_path / "journal.sqlite3")
    with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
        post_events(client, RUN, [{"kind": "run_started"}])
        cases = [
            ([{"kind": "started"}], "events.0.task_index"),
            ([{"kind": "started", "task_index": 1, "attempt": -1}], "events.0.attempt"),
            ([{"kind": "heartbeat", "task_index": 1, "row": {}}], "events.0.row"),
            ([{"kind": "started", "task_index": 1.5}], "events.0.task_index.int"),
        ]
        for events, field in cases:
            response = client.post(f"/v1/runs/{RUN}/events", json=events)
            assert response.status_code == 422, response.text
            assert response.json()["field"] == field
        for limit in ("-1", "1001", "x", "\u00b2", "9" * 5000):
            response = client.get(f"/v1/runs/{RUN}/inflight", params={"limit": limit})
            assert (response.status_code, response.json()["field"]) == (400, "limit")
        response = client.get("/v1/runs/nope/inflight")
        assert (response.status_code, response.json()["error"]) == (404, "unknown_run")
        response = client.post("/v1/runs/nope/events", json=[{"kind": "heartbeat", "task_index": 1}])
        assert (response.status_code, response.json()["error"]) == (404, "unknown_run")
        assert _inflight(client)["count"] == 0


class _FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


async def test_the_service_flags_on_its_clock_within_one_interval(tmp_path: Path) -> None:
    """The service's evaluation on an injected clock: stamped at the first tick past the threshold."""
    clock = _FakeClock(1.8e9)
    interval = 5.0  # the test calls the evaluation itself; the service's own timer sleeps an hour
    rules = InflightRules(eval_interval_s=3600.0)
    service = Service(ServiceSettings(journal_path=tmp_path / "j.sqlite3", inflight=rules), clock=clock)
    await service.start()
    try:
        transport = httpx.ASGITransport(app=create_app(service))
        async with httpx.AsyncClient(transport=transport, base_url="http://sidecar") as client:
            start = {"kind": "run_started", "task_timeout_s": 60.0}
            events = [start, *({"kind": "started", "task_index": t} for t in range(3))]
            assert (await client.post(f"/v1/runs/{RUN}/events", json=events)).status_code == 200
            began = clock.now
            ticks = []
            while not ticks or clock.now - began <= 60.0 + interval:
                clock.now += interval
                ticks.append((clock.now, service.evaluate_inflight()))
            body = (await client.get(f"/v1/runs/{RUN}/inflight")).json()
    finally:
        await service.stop()
    assert [flagged for _, flagged in ticks].count(3) == 1
    (flag_tick,) = [at for at, flagged in ticks if flagged]
    assert flag_tick - began > 60.0 >= flag_tick - interval - began  # never before; within one
    assert {entry["flagged_at"] for entry in body["oldest"]} == {flag_tick}
    assert body["stragglers"] == 3 and body["oldest"][0]["age_s"] == clock.now - began


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--straggler-factor", "0"),
        ("--straggler-min-samples", "0"),
        ("--stall-after", "nan"),
        ("--inflight-interval", "-1"),
    ],
)
def test_bad_rule_flags_are_usage_errors(
    flag: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:  # refused by the parser, before anything starts
        cli_main(["serve", "--port", "0", "--journal", str(tmp_path / "j"), flag, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rollout-sidecar serve: error: argument {flag}: ") and value in err
    assert err.count("\n") == 1 and not (tmp_path / "j").exists()
