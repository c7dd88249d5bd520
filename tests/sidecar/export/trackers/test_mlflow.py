"""MLflow export against a real tracking server, read back with ``MlflowClient``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from sidecar.export.trackers import TrackerSettings
from sidecar.export.trackers.keys import STEP_KEY
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from tests.reliability_harness.sidecar_process import SidecarProcess
from tests.sidecar.export.trackers.conftest import MlflowServer
from tests.sidecar.export.trackers.support import (
    RUN,
    assert_artifacts,
    expected_final,
    report_files,
    run_events,
    wait_for,
)
from tests.sidecar.export.trackers.test_keys import documented_keys
from tests.sidecar.service_support import post_events

mlflow = pytest.importorskip("mlflow", reason="the mlflow extra is not installed: pip install '.[mlflow]'")
from mlflow.tracking import MlflowClient  # noqa: E402

INTERVAL_S = 0.2


def _settings(tmp_path: Path, server: MlflowServer, experiment: str) -> ServiceSettings:
    trackers = TrackerSettings(
        mlflow_tracking_uri=server.url,
        mlflow_experiment_name=experiment,
        interval_s=INTERVAL_S,
        retry_down_s=1.0,
    )
    return ServiceSettings(
        port=0, journal_path=tmp_path / "journal.sqlite3", health_metrics_interval_s=0.0, trackers=trackers
    )


def _runs_of(client: Any, experiment: str, run_id: str = RUN) -> list[Any]:
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    query = f"tags.`rollout_sidecar.run_id` = '{run_id}'"
    return list(client.search_runs([found.experiment_id], filter_string=query))


def _finished(client: Any, ref: str, status: str = "FINISHED") -> Any:
    """The run once its final summary is there and it has its end ``status``."""
    run = client.get_run(ref)
    done = run.data.tags.get("rollout_sidecar.final") == "done" and run.info.status == status
    return run if done else None


def _artifacts(client: Any, ref: str, out: Path) -> dict[str, bytes]:
    local = Path(client.download_artifacts(ref, "rollout_sidecar", str(out)))
    return {path.name: path.read_bytes() for path in local.iterdir()}


def _steps(client: Any, ref: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(ref, STEP_KEY))


class TestServiceExport:
    def test_live_steps_final_metrics_and_artifacts_equal_the_report(
        self, tmp_path: Path, mlflow_env: MlflowServer
    ) -> None:
        client = MlflowClient(mlflow_env.url)
        run, started = run_events()
        half = len(run.events) // 2
        with (
            ServiceThread(_settings(tmp_path, mlflow_env, "svc")) as base,
            httpx.Client(base_url=base, timeout=30) as http,
        ):
            post_events(http, RUN, [started, *run.events[:half]])
            (created,) = wait_for(lambda: _runs_of(client, "svc"), "the run to be created")
            ref = created.info.run_id
            wait_for(lambda: len(_steps(client, ref)) >= 3, "three live steps")
            post_events(http, RUN, [*run.events[half:], {"kind": "run_ended"}])
            final = wait_for(lambda: _finished(client, ref), "the final summary")
            files = report_files(base, RUN, tmp_path / "report")
        assert len(_runs_of(client, "svc")) == 1
        assert final.info.status == "FINISHED"  # the sidecar created it, so it ends it
        steps = _steps(client, ref)
        assert steps == list(range(len(steps)))  # every step once, in order
        live = client.get_run(ref).data.metrics
        assert set(live) | set(final.data.metrics) <= documented_keys()  # every logged key documented
        assert live["rollout_sidecar/health/unhealthy"] > 0

        expected = expected_final(files)
        logged = {
            key: value
            for key, value in final.data.metrics.items()
            if key.startswith("rollout_sidecar/final/")
        }
        assert logged == expected
        for key in expected:  # logged once, not once per step
            assert len(client.get_metric_history(ref, key)) == 1
        params = final.data.params
        assert params["rollout_sidecar/dispatch_budget_s"] == "7200.0"
        assert params["rollout_sidecar/plan_tasks"] == "10"
        assert params["rollout_sidecar/plan_rollouts"] == "30"
        assert params["rollout_sidecar/ignored_checks"] == "model_call_runaway_generation"
        assert params["rollout_sidecar/mlflow_version"] == mlflow.__version__
        assert_artifacts(_artifacts(client, ref, tmp_path / "down"), files, RUN)

    def test_logs_into_the_run_the_client_names_and_leaves_it_open(
        self, tmp_path: Path, mlflow_env: MlflowServer
    ) -> None:
        client = MlflowClient(mlflow_env.url)
        experiment = client.create_experiment("trainer")
        trainer = client.create_run(experiment, run_name="trainer").info.run_id
        client.log_metric(trainer, "progress/total/rollouts_per_min", 3.0, step=0)
        run, started = run_events(seed=5)
        with (
            ServiceThread(_settings(tmp_path, mlflow_env, "unused")) as base,
            httpx.Client(base_url=base, timeout=30) as http,
        ):
            post_events(http, RUN, [{**started, "tracking": {"mlflow_run_id": trainer}}, *run.events])
            post_events(http, RUN, [{"kind": "run_ended"}])
            final = wait_for(
                lambda: _finished(client, trainer, "RUNNING"), "the final summary in the trainer's run"
            )
            files = report_files(base, RUN, tmp_path / "report")
        assert final.info.status == "RUNNING"  # the trainer's run: the trainer ends it
        assert final.data.metrics["progress/total/rollouts_per_min"] == 3.0  # NeMo Gym's key untouched
        assert _runs_of(client, "unused") == []
        assert_artifacts(_artifacts(client, trainer, tmp_path / "down"), files, RUN)

    def test_a_bad_tracking_field_is_a_422_naming_it(self, tmp_path: Path, mlflow_env: MlflowServer) -> None:
        with (
            ServiceThread(_settings(tmp_path, mlflow_env, "bad")) as base,
            httpx.Client(base_url=base, timeout=30) as http,
        ):
            for tracking, field in (
                ({"mlflow_run_id": "x" * 65}, "mlflow_run_id"),
                ({"mlflow_run_id": "a'b"}, "mlflow_run_id"),
                ({"wandb_run_path": "a/b/c/d"}, "wandb_run_path"),
                ({"neptune": "x"}, "neptune"),
            ):
                response = http.post(
                    f"/v1/runs/{RUN}/events", json=[{"kind": "run_started", "tracking": tracking}]
                )
                assert response.status_code == 422, response.text
                assert field in response.text


def test_sigkill_mid_run_continues_the_same_run_with_continuous_steps(
    tmp_path: Path, mlflow_env: MlflowServer
) -> None:
    client = MlflowClient(mlflow_env.url)
    run, started = run_events(seed=8)
    half = len(run.events) // 2
    sidecar = SidecarProcess(
        tmp_path / "journal.sqlite3",
        extra_args=("--mlflow-tracking-uri", mlflow_env.url, "--mlflow-experiment", "kill",
                    "--tracker-interval", str(INTERVAL_S)),
    )  # fmt: skip
    base = sidecar.start()
    try:
        with httpx.Client(base_url=base, timeout=30) as http:
            post_events(http, RUN, [started, *run.events[:half]])
        (created,) = wait_for(lambda: _runs_of(client, "kill"), "the run to be created")
        ref = created.info.run_id
        wait_for(lambda: len(_steps(client, ref)) >= 4, "four live steps")
        sidecar.kill()
        before = _steps(client, ref)
        base = sidecar.start()
        with httpx.Client(base_url=base, timeout=30) as http:
            post_events(http, RUN, run.events[half:])
            wait_for(lambda: len(_steps(client, ref)) >= len(before) + 3, "steps after the restart")
            sidecar.kill()  # once more, now with the run's end journaled but maybe not exported
            base = sidecar.start()
        with httpx.Client(base_url=base, timeout=30) as http:
            post_events(http, RUN, [{"kind": "run_ended"}])
            final = wait_for(lambda: _finished(client, ref), "the final summary")
            files = report_files(base, RUN, tmp_path / "report")
        sidecar.stop()
        sidecar.start()  # a restart after the end logs nothing more
        sidecar.stop()
    finally:
        sidecar.kill()
    assert [r.info.run_id for r in _runs_of(client, "kill")] == [ref]  # no second run
    steps = _steps(client, ref)
    assert steps == list(range(len(steps)))  # none repeated, none skipped, none backwards
    assert steps[: len(before)] == before
    expected = expected_final(files)
    assert {k: v for k, v in final.data.metrics.items() if k.startswith("rollout_sidecar/final/")} == expected
    for key in expected:
        assert len(client.get_metric_history(ref, key)) == 1  # the final summary once
    assert_artifacts(_artifacts(client, ref, tmp_path / "down"), files, RUN)


def _dropped(http: httpx.Client, tracker: str, reason: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(http.get("/metrics").text):
        for sample in family.samples:
            if sample.name == "rollout_sidecar_tracker_exports_dropped_total" and sample.labels == {
                "tracker": tracker,
                "reason": reason,
            }:
                total += sample.value
    return total


def test_an_outage_is_counted_ingest_goes_on_and_the_summary_arrives_after_it(
    tmp_path: Path, mlflow_env: MlflowServer
) -> None:
    client = MlflowClient(mlflow_env.url)
    run, started = run_events(seed=11)
    third = len(run.events) // 3
    try:
        with (
            ServiceThread(_settings(tmp_path, mlflow_env, "outage")) as base,
            httpx.Client(base_url=base, timeout=30) as http,
        ):
            post_events(http, RUN, [started, *run.events[:third]])
            (created,) = wait_for(lambda: _runs_of(client, "outage"), "the run to be created")
            ref = created.info.run_id
            wait_for(lambda: len(_steps(client, ref)) >= 2, "two live steps")
            mlflow_env.stop()
            post_events(http, RUN, run.events[third : 2 * third])  # ingest answers during the outage
            assert http.get("/drain_margin", params={"run_id": RUN}).status_code == 200
            wait_for(lambda: _dropped(http, "mlflow", "failed") >= 2, "failed retries to be counted")
            wait_for(lambda: _dropped(http, "mlflow", "down") >= 3, "steps skipped while down")
            post_events(http, RUN, [*run.events[2 * third :], {"kind": "run_ended"}])
            mlflow_env.start()
            final = wait_for(lambda: _finished(client, ref), "the final summary after the outage")
            files = report_files(base, RUN, tmp_path / "report")
    finally:
        if not mlflow_env.running:  # the session's other tests need it
            mlflow_env.start()
    steps = _steps(client, ref)
    assert steps == list(range(len(steps)))  # dropped steps are not numbered: no gap
    assert {k: v for k, v in final.data.metrics.items() if k.startswith("rollout_sidecar/final/")} == (
        expected_final(files)
    )
    log = (tmp_path / "journal.sqlite3").with_name("journal.sqlite3.trackers.sqlite3")
    assert log.exists()
