"""The real service on an ephemeral loopback port, driven over HTTP like a dispatcher would."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from health import health_check_run_dir
from sidecar.cli import main as cli_main
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from sidecar.perf import build_ng_perf

from .service_support import GeneratedRun, generate_run, post_events

RUN = "run-it"


def _start_event(run: GeneratedRun, run_dir: Path, **extra: Any) -> dict[str, Any]:
    return {"kind": "run_started", "plan": run.plan, "source_path": str(run_dir / "rollouts.jsonl"), **extra}


def _stable_report(body: dict[str, Any]) -> dict[str, Any]:
    """The report minus the wall-clock rate, which moves with the time of the request."""
    body["latency"].pop("completions_per_hour")
    return body


def _report_files(url: str, out: Path) -> dict[str, Any]:
    """The CLI's files: the two health files as bytes, ``report.json`` parsed (minus the rate)."""
    assert cli_main(["report", "--sidecar", url, "--run-id", RUN, "--out", str(out)]) == 0
    files: dict[str, Any] = {path.name: path.read_bytes() for path in out.iterdir()}
    assert sorted(files) == ["quality_summary.json", "report.json", "rollout_verdicts.jsonl"]
    files["report.json"] = _stable_report(orjson.loads(files["report.json"]))
    return files


@pytest.fixture(scope="module")
def generated() -> GeneratedRun:
    return generate_run(num_tasks=16, repeats=3, seed=11, fault_rate=0.05, failure_rate=0.15)


class TestIngestedRun:
    def test_report_equals_batch_and_survives_restart(
        self, tmp_path: Path, generated: GeneratedRun, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = tmp_path / "run"
        generated.write_rollouts(run_dir)
        settings = ServiceSettings(
            port=0, journal_path=tmp_path / "state" / "journal.sqlite3"
        )

        thread = ServiceThread(settings)
        with thread as url, httpx.Client(base_url=url, timeout=30) as client:
            assert (
                client.post(f"/v1/runs/{RUN}/events", json=[_start_event(generated, run_dir)]).status_code
                == 200
            )
            results = post_events(client, RUN, generated.events)
            assert [r["status"] for r in results] == ["accepted"] * len(generated.events)
            for event, result in zip(generated.events, results, strict=True):
                if event["kind"] == "completed" and "row" in event:
                    expected = build_ng_perf(event["row"], event["seconds"] * 1000.0)
                    assert orjson.dumps(result["ng_perf"]) == orjson.dumps(expected)
            assert client.post(f"/v1/runs/{RUN}/events", json=[{"kind": "run_ended"}]).status_code == 200

            live = _report_files(url, tmp_path / "live")
            report_live = _stable_report(client.get("/report", params={"run_id": RUN}).json())
            margin = client.get("/drain_margin", params={"run_id": RUN}).json()

            again = post_events(client, RUN, generated.events, batch=50)
            assert {r["status"] for r in again} == {"duplicate"}
            assert _report_files(url, tmp_path / "after-dupes") == live

        health_check_run_dir(run_dir, workers=1)
        capsys.readouterr()
        assert live["quality_summary.json"] == (run_dir / "quality_summary.json").read_bytes()
        assert live["rollout_verdicts.jsonl"] == (run_dir / "rollout_verdicts.jsonl").read_bytes()

        tracker = generated.local_tracker()
        assert margin["drain_margin"] == tracker.drain_margin(None)
        assert margin["samples"] == tracker.count
        assert margin["drained"] == tracker.drained
        assert report_live["latency"]["summary"] == tracker.summary()
        accounting = report_live["accounting"]
        assert accounting["expected"] == sum(generated.plan.values())
        assert accounting["expected"] == (
            accounting["succeeded"] + accounting["failed"] + accounting["drained"] + accounting["missing"]
        )

        # Restart from the snapshot written at shutdown (nothing to replay), then from the journal
        # alone (every record replayed): both rebuild the same state.
        for expected_replayed in (0, len(generated.events) + 2):
            if expected_replayed:
                with sqlite3.connect(settings.journal_path) as conn:
                    conn.execute("DELETE FROM snapshots")
                conn.close()
            with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
                assert client.get("/readyz").json()["replayed"] == expected_replayed
                assert _report_files(url, tmp_path / f"restarted-{expected_replayed}") == live
                assert _stable_report(client.get("/report", params={"run_id": RUN}).json()) == report_live
                assert client.get("/drain_margin", params={"run_id": RUN}).json() == margin

    def test_bad_bodies_are_rejected_and_service_keeps_serving(self, tmp_path: Path) -> None:
        settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3", body_cap=64 * 1024)
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            path = f"/v1/runs/{RUN}/events"
            cases = [
                (client.post(path, content=b"{not json"), 400, "invalid_json"),
                (client.post(path, content=b"[" * 1100 + b"]" * 1100), 400, "too_deep"),
                (client.post(path, content=b" " * (65 * 1024)), 413, "too_large"),
                (
                    client.post(path, json=[{"kind": "completed", "seconds": 1.0, "row": {}}]),
                    404,
                    "unknown_run",
                ),
                (client.post(path, json=[{"kind": "run_started", "surprise": 1}]), 422, "validation"),
                (client.post(path, json=[]), 422, "validation"),
                (client.post("/v1/runs/bad%20id/events", json=[{"kind": "run_ended"}]), 400, "validation"),
            ]
            for response, status, error in cases:
                assert response.status_code == status, response.text
                body = response.json()
                assert body["error"] == error
                assert set(body) == {"error", "field", "detail"}
            assert client.post(path, json=[{"kind": "run_started"}]).status_code == 200
            assert client.get("/healthz").json() == {"status": "ok"}
            metrics = client.get("/metrics").text
            assert 'rollout_sidecar_ingest_errors_total{reason="too_deep"} 1.0' in metrics


class TestEmptyRun:
    def test_a_run_without_rows_reports_like_an_empty_file(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = tmp_path / "run"
        GeneratedRun(plan={}).write_rollouts(run_dir)
        settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
        with ServiceThread(settings) as url, httpx.Client(base_url=url, timeout=30) as client:
            events = [
                {"kind": "run_started", "source_path": str(run_dir / "rollouts.jsonl")},
                {"kind": "run_ended"},
            ]
            assert client.post(f"/v1/runs/{RUN}/events", json=events).status_code == 200
            files = _report_files(url, tmp_path / "out")
        health_check_run_dir(run_dir, workers=1)
        capsys.readouterr()
        assert files["quality_summary.json"] == (run_dir / "quality_summary.json").read_bytes()
        assert files["rollout_verdicts.jsonl"] == b"" == (run_dir / "rollout_verdicts.jsonl").read_bytes()
        assert files["report.json"]["perf_summary"] is None
