"""OTLP/HTTP push into a real receiver: the same numbers as a scrape, continuity across SIGKILL,
a failing, slow, dripping or flooding collector counted and never in the way of ingest or shutdown,
and the names NeMo Gym's collector expects when fed the environment ``gym eval submit`` sets."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sidecar.cli import main as cli_main
from sidecar.export.otlp import (
    OtlpConfigError,
    otel_name,
    resolve_endpoint,
    resolve_interval,
    resolve_protocol,
    service_name,
)
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from tests.dispatcher_client.support import SidecarProcess, free_port
from tests.reliability_harness.proc_stats import peak_resident_bytes

from .otlp_receiver import OtlpReceiver, Series, as_prometheus, metric_named
from .service_support import generate_run, post_events
from .test_otlp_resource import GYM_EVAL_SUBMIT, SLURM

pytest.importorskip(
    "opentelemetry.sdk.metrics", reason="the otel extra is not installed: pip install '.[otel]'"
)
pytest.importorskip("opentelemetry.exporter.otlp.proto.common", reason="the otel extra is not installed")
pytest.importorskip(
    "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2", reason="no opentelemetry-proto"
)

REPO = Path(__file__).resolve().parents[2]
RUN = "run-otlp"
INTERVAL_S = 0.2
#: Values that move with the clock between a push and a scrape, or count the pushes themselves.
_MOVING = ("_per_hour", "_oldest_age_seconds", "_last_commit_timestamp_seconds", "_otlp_exports")


def prometheus_name(name: str, unit: str, *, monotonic_sum: bool = False) -> str:
    """The collector's Prometheus name of an OTel metric made by ``otel_name``."""
    suffix = {"s": "_seconds", "1/h": "_per_hour", "By": "_bytes"}.get(unit, "")
    return name.replace(".", "_") + suffix + ("_total" if monotonic_sum else "")


def _scrape(client: httpx.Client) -> Series:
    out: Series = {}
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def _summary_totals(series: Series) -> set[tuple[str, frozenset[tuple[str, str]]]]:
    """The quantile summary's ``_count``/``_sum``: not pushed (tracker samples and total)."""
    return {key for key in series if key[0].startswith("rollout_sidecar_task_duration_quantile_seconds_")}


def _counter(series: Series, name: str, **labels: str) -> float:
    return series[(name, frozenset(labels.items()))]


class TestNames:
    def test_every_contract_name_translates_back(self) -> None:
        names = (REPO / "deploy" / "metric_names.txt").read_text().split()
        for name in names:
            family = name
            for suffix in ("_total", "_bucket", "_sum", "_count", "_info"):
                family = family.removesuffix(suffix)
            otel, unit = otel_name(family)
            assert otel.startswith("rollout_sidecar.") and "_" not in otel.removeprefix("rollout_sidecar."), (
                otel
            )
            back = prometheus_name(otel, unit, monotonic_sum=name.endswith("_total"))
            assert name.startswith(back), (name, otel, unit, back)
        assert otel_name("rollout_sidecar_task_duration_seconds") == ("rollout_sidecar.task.duration", "s")
        assert otel_name("rollout_sidecar_rollouts_per_hour") == ("rollout_sidecar.rollouts", "1/h")

    def test_endpoint_and_interval_from_flag_or_environment(self) -> None:
        assert resolve_endpoint("http://127.0.0.1:4318/", {}) == "http://127.0.0.1:4318/v1/metrics"
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://localhost:4318"}
        assert resolve_endpoint(None, env) is None  # off unless NeMo Gym's switch is on
        env["NEMO_GYM_OTEL_ENABLED"] = "1"
        assert resolve_endpoint(None, env) == "http://localhost:4318/v1/metrics"
        env["OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"] = "http://c:9/custom"
        assert resolve_endpoint(None, env) == "http://c:9/custom"
        # the SDKs' default endpoint; NeMo Gym's metrics and exporter switches turn the push off
        assert resolve_endpoint(None, {"NEMO_GYM_OTEL_ENABLED": "1"}) == "http://localhost:4318/v1/metrics"
        assert resolve_endpoint(None, {**env, "NEMO_GYM_OTEL_METRICS_ENABLED": "0"}) is None
        assert resolve_endpoint(None, {**env, "NEMO_GYM_OTEL_EXPORTER": "console"}) is None
        with pytest.raises(OtlpConfigError, match="ftp://x"):
            resolve_endpoint("ftp://x", {})
        assert resolve_interval({}) == 15.0
        assert resolve_interval({"OTEL_METRIC_EXPORT_INTERVAL": "2500"}) == 2.5
        for bad in ("soon", "0", "-5", "nan"):
            with pytest.raises(OtlpConfigError, match="OTEL_METRIC_EXPORT_INTERVAL"):
                resolve_interval({"OTEL_METRIC_EXPORT_INTERVAL": bad})

    def test_bad_endpoint_is_a_usage_error(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        code = cli_main(
            ["serve", "--journal", str(tmp_path / "j"), "--otlp-endpoint", "ftp://x", "--port", "0"]
        )
        assert code == 2
        assert "--otlp-endpoint" in capsys.readouterr().err

    def test_only_http_protobuf_is_spoken(self) -> None:
        assert resolve_protocol({}) == resolve_protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
        with pytest.raises(OtlpConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL='grpc'"):
            resolve_protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
        with pytest.raises(OtlpConfigError, match="OTEL_EXPORTER_OTLP_METRICS_PROTOCOL='http/json'"):
            resolve_protocol({"OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/json"})
        # the metrics variable wins: a job whose other processes speak gRPC can still run the sidecar
        both = {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL": "http/protobuf"}
        assert resolve_protocol(both) == "http/protobuf"

    @pytest.mark.parametrize(
        ("variable", "value", "named"),
        [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc", "OTEL_EXPORTER_OTLP_PROTOCOL='grpc'"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a b=c", "OTEL_EXPORTER_OTLP_HEADERS"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "-1", "OTEL_EXPORTER_OTLP_TIMEOUT"),
        ],
    )
    def test_an_unusable_gym_environment_is_a_one_line_usage_error(
        self,
        capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch,
        tmp_path: Path,
        variable: str,
        value: str,
        named: str,
    ) -> None:
        for key, default in GYM_EVAL_SUBMIT.items():
            monkeypatch.setenv(key, default)
        monkeypatch.setenv(variable, value)
        code = cli_main(["serve", "--journal", str(tmp_path / "j"), "--port", "0"])
        err = capsys.readouterr().err
        assert code == 2
        assert named in err and len(err.strip().splitlines()) == 1, err


def _settings(tmp_path: Path, receiver_url: str) -> ServiceSettings:
    return ServiceSettings(
        port=0,
        journal_path=tmp_path / "journal.sqlite3",
        otlp_endpoint=receiver_url + "/v1/metrics",
        otlp_interval_s=INTERVAL_S,
        health_metrics_interval_s=0.0,
    )


def test_pushed_values_equal_a_scrape_of_the_same_state(tmp_path: Path) -> None:
    run = generate_run(num_tasks=12, repeats=3, seed=4, failure_rate=0.15, drained_fraction=0.05)
    started = {"kind": "run_started", "plan": run.plan, "task_timeout_s": 600.0, "started_at": 1.75e9}
    receiver = OtlpReceiver()
    with (
        receiver as url,
        ServiceThread(_settings(tmp_path, url)) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        post_events(client, RUN, [started, *run.events, {"kind": "started", "task_index": 99}])
        seen = len(receiver.requests)
        receiver.wait_for(seen + 2)  # the second push started after the last event was applied
        scraped = _scrape(client)
        request = receiver.wait_for(len(receiver.requests) + 1)
    pushed = as_prometheus(request)
    assert set(pushed) == set(scraped) - _summary_totals(scraped)
    differ = {
        key: (pushed[key], scraped[key])
        for key in pushed
        if pushed[key] != scraped[key] and not any(part in key[0] for part in _MOVING)
    }
    assert differ == {}
    assert _counter(pushed, "rollout_sidecar_rollouts_completed_total", run_id=RUN) > 0

    (resource,) = request.resource_metrics
    attributes = {a.key: a.value.string_value for a in resource.resource.attributes}
    assert attributes["service.name"] == service_name() == "nemo-gym/rollout-sidecar"
    duration = metric_named(request, "rollout_sidecar.task.duration")
    assert duration.unit == "s"
    assert duration.histogram.aggregation_temporality == 2  # cumulative
    completed_seconds = [e["seconds"] for e in run.events if e["kind"] == "completed" and "seconds" in e]
    for point in duration.histogram.data_points:
        assert point.start_time_unix_nano == int(1.75e9 * 1e9)  # the run's start
        assert list(point.explicit_bounds)[:3] == [1.0, 2.0, 5.0]
        if {a.key: a.value.string_value for a in point.attributes}["outcome"] == "completed":
            assert (point.min, point.max) == (min(completed_seconds), max(completed_seconds))
    completed = metric_named(request, "rollout_sidecar.rollouts.completed")
    assert completed.sum.is_monotonic and completed.sum.aggregation_temporality == 2
    keys = {a.key for point in completed.sum.data_points for a in point.attributes}
    assert keys == {"rollout_sidecar.run_id"}  # never the collector's own run_id


def _pushed_total(request: Any) -> tuple[float, int]:
    completed = metric_named(request, "rollout_sidecar.rollouts.completed")
    (point,) = [p for p in completed.sum.data_points]
    return _value_of(point), point.start_time_unix_nano


def _value_of(point: Any) -> float:
    return float(point.as_double if point.HasField("as_double") else point.as_int)


def test_cumulative_totals_continue_after_sigkill_and_restart(tmp_path: Path) -> None:
    run = generate_run(num_tasks=10, repeats=3, seed=9, failure_rate=0.0, drained_fraction=0.0)
    first, second = run.events[:15], run.events[15:]
    receiver = OtlpReceiver()
    with receiver as url:
        sidecar = SidecarProcess(
            tmp_path / "journal.sqlite3",
            extra_args=("--otlp-endpoint", url),
            env={"OTEL_METRIC_EXPORT_INTERVAL": str(int(INTERVAL_S * 1000))},
        )
        base = sidecar.start()
        with httpx.Client(base_url=base, timeout=30) as client:
            post_events(client, RUN, [{"kind": "run_started", "plan": run.plan}, *first])
        receiver.wait_for(len(receiver.requests) + 2)
        before, start_before = _pushed_total(receiver.requests[-1])
        sidecar.kill()

        count = len(receiver.requests)
        base = sidecar.start()
        after, start_after = _pushed_total(receiver.wait_for(count + 1))
        assert (after, start_after) == (before, start_before) == (15.0, start_after)
        with httpx.Client(base_url=base, timeout=30) as client:
            post_events(client, RUN, second)
        total, start_total = _pushed_total(receiver.wait_for(len(receiver.requests) + 2))
        sidecar.stop()
    assert (total, start_total) == (float(len(run.events)), start_before)


@pytest.mark.parametrize("mode", ["fail", "slow", "down"])
def test_a_failing_or_slow_collector_is_counted_and_ingest_goes_on(
    tmp_path: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    run = generate_run(num_tasks=8, repeats=2, seed=2)
    receiver = OtlpReceiver(mode="slow" if mode == "slow" else "fail", delay_s=3.0)
    with receiver as url:
        target = f"http://127.0.0.1:{free_port()}" if mode == "down" else url  # nothing listens there
        with (
            ServiceThread(_settings(tmp_path, target)) as base,
            httpx.Client(base_url=base, timeout=30) as client,
        ):
            post_events(client, RUN, [{"kind": "run_started", "plan": run.plan}])
            deadline = time.monotonic() + 30
            dropped = 0.0
            while time.monotonic() < deadline and dropped < 2:
                post_events(client, RUN, run.events[:4])  # duplicates after the first round: still answered
                margin = client.get("/drain_margin", params={"run_id": RUN})
                assert margin.status_code == 200
                series = _scrape(client)
                dropped = sum(
                    value
                    for (name, _), value in series.items()
                    if name == "rollout_sidecar_otlp_exports_dropped_total"
                )
                time.sleep(INTERVAL_S)
            assert dropped >= 2
            reasons = {
                dict(labels)["reason"]
                for (name, labels), value in series.items()
                if value and "dropped" in name
            }
            assert reasons <= {"failed", "busy"}
            if mode == "slow":
                assert "busy" in reasons  # the next push found the slow one still sending
            if mode == "down":
                assert reasons == {"failed"}  # a refused connection fails at once, never busy
            assert _counter(series, "rollout_sidecar_otlp_exports_total") == 0


def _dropped(client: httpx.Client) -> dict[str, float]:
    series = _scrape(client)
    return {
        dict(labels)["reason"]: value
        for (name, labels), value in series.items()
        if name == "rollout_sidecar_otlp_exports_dropped_total"
    }


def _resource(request: Any) -> dict[str, str]:
    (resource,) = request.resource_metrics
    return {a.key: a.value.string_value for a in resource.resource.attributes}


def test_the_environment_gym_eval_submit_sets(tmp_path: Path) -> None:
    """No flag: NeMo Gym's switch, run id, endpoint, protocol and headers drive the push, the
    resource carries NeMo Gym's names and the metrics keep names of their own."""
    run = generate_run(num_tasks=6, repeats=2, seed=3, failure_rate=0.0, drained_fraction=0.0)
    receiver = OtlpReceiver()
    with receiver as url:
        env = {
            **GYM_EVAL_SUBMIT,
            **SLURM,
            "OTEL_EXPORTER_OTLP_ENDPOINT": url,  # the job's collector on localhost:4318
            "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20ingest-token",
            "OTEL_METRIC_EXPORT_INTERVAL": str(int(INTERVAL_S * 1000)),
        }
        with SidecarProcess(tmp_path / "journal.sqlite3", env=env) as base:
            with httpx.Client(base_url=base, timeout=30) as client:
                post_events(client, RUN, [{"kind": "run_started", "plan": run.plan}, *run.events])
            request = receiver.wait_for(len(receiver.requests) + 2)
    attributes = _resource(request)
    assert attributes["service.name"] == "nemo-gym/rollout-sidecar"
    assert attributes["nemo.run.id"] == "job-123"
    assert attributes["service.instance.id"].startswith("job-123-rollout-sidecar-")
    assert {k: attributes[k] for k in ("slurm.job.id", "slurm.job.name", "slurm.procid", "slurm.nodeid")} == {
        "slurm.job.id": "4242",
        "slurm.job.name": "eval",
        "slurm.procid": "3",
        "slurm.nodeid": "1",
    }
    assert receiver.headers[-1]["authorization"] == "Bearer ingest-token"
    assert receiver.headers[-1]["content-type"] == "application/x-protobuf"

    metrics = [m for r in request.resource_metrics for s in r.scope_metrics for m in s.metrics]
    names = {m.name for m in metrics}
    assert all(name.startswith("rollout_sidecar.") for name in names), names
    assert "gym.rollout.duration_ms" not in names  # NeMo Gym's agent servers own that name
    for metric in metrics:
        if metric.WhichOneof("data") == "sum":  # counters: cumulative monotonic sums
            assert metric.sum.is_monotonic and metric.sum.aggregation_temporality == 2, metric.name
    assert metric_named(request, "rollout_sidecar.rollouts.completed").WhichOneof("data") == "sum"
    assert metric_named(request, "rollout_sidecar.otlp.exports").WhichOneof("data") == "sum"
    duration = metric_named(request, "rollout_sidecar.task.duration")
    assert duration.unit == "s"
    for point in duration.histogram.data_points:
        assert point.explicit_bounds[-1] >= 6 * 3600  # buckets reach hours
        assert {a.key for a in point.attributes} == {"rollout_sidecar.run_id", "outcome"}
    completed = metric_named(request, "rollout_sidecar.rollouts.completed")
    (point,) = completed.sum.data_points
    assert {a.key: a.value.string_value for a in point.attributes} == {"rollout_sidecar.run_id": RUN}
    assert _value_of(point) == len(run.events)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc (Linux) for the peak RSS")
def test_a_collector_answering_600_mb_does_not_grow_the_process(tmp_path: Path) -> None:
    size = 600 << 20
    receiver = OtlpReceiver(mode="huge", huge_bytes=size)
    with receiver as url:
        sidecar = SidecarProcess(
            tmp_path / "journal.sqlite3",
            extra_args=("--otlp-endpoint", url),
            env={"OTEL_METRIC_EXPORT_INTERVAL": str(int(INTERVAL_S * 1000))},
        )
        base = sidecar.start()
        try:
            receiver.wait_for_posts(4)
            assert sidecar.pid is not None
            peak = peak_resident_bytes(sidecar.pid)
            with httpx.Client(base_url=base, timeout=30) as client:
                sent = _counter(_scrape(client), "rollout_sidecar_otlp_exports_total")
        finally:
            sidecar.stop()
    assert peak < 300 << 20, f"peak RSS {peak / 2**20:.0f} MiB after {receiver.posts} answers of 600 MiB"
    assert sent >= 3  # the 2xx answers counted as sent, their bodies left unread


def test_sigterm_during_a_dripping_push_exits_and_releases_the_journal(tmp_path: Path) -> None:
    """Even with the longest export deadline allowed, shutdown does not wait on a stuck push."""
    journal = tmp_path / "journal.sqlite3"
    receiver = OtlpReceiver(mode="drip", delay_s=0.2)
    with receiver as url:
        sidecar = SidecarProcess(
            journal,
            extra_args=("--otlp-endpoint", url),
            env={
                "OTEL_METRIC_EXPORT_INTERVAL": str(int(INTERVAL_S * 1000)),
                "OTEL_EXPORTER_OTLP_TIMEOUT": "600",
            },
        )
        sidecar.start()
        receiver.wait_for_posts(1)  # the sender is now inside the drip
        code = sidecar.stop(timeout=60)  # SIGTERM; SIGKILL (code -9) only if it were still alive
        log = sidecar.log_since()
    assert code == 0, log[-2000:]
    assert "final otlp push not confirmed" in log
    fd = os.open(journal.with_name(journal.name + ".lock"), os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if a process still held it
    finally:
        os.close(fd)


def test_a_dripping_collector_does_not_hold_the_sender(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "0.5")
    receiver = OtlpReceiver(mode="drip", delay_s=0.05)
    with (
        receiver as url,
        ServiceThread(_settings(tmp_path, url)) as base,
        httpx.Client(base_url=base, timeout=30) as client,
    ):
        receiver.wait_for_posts(3)  # one send at a time: each earlier one ended at its deadline
        assert _dropped(client)["failed"] >= 2


def test_an_outage_is_counted_failed_and_logged_once_with_its_end(tmp_path: Path) -> None:
    port = free_port()
    sidecar = SidecarProcess(
        tmp_path / "journal.sqlite3",
        extra_args=("--otlp-endpoint", f"http://127.0.0.1:{port}"),
        env={"OTEL_METRIC_EXPORT_INTERVAL": str(int(INTERVAL_S * 1000))},
    )
    base = sidecar.start()
    try:
        with httpx.Client(base_url=base, timeout=30) as client:
            deadline = time.monotonic() + 30
            while _dropped(client)["failed"] < 3 and time.monotonic() < deadline:
                time.sleep(INTERVAL_S)
            down = _dropped(client)
            receiver = OtlpReceiver(port=port)  # the collector comes back on the same port
            with receiver:
                receiver.wait_for(1)
                deadline = time.monotonic() + 30
                while "otlp collector back" not in sidecar.log_since() and time.monotonic() < deadline:
                    time.sleep(INTERVAL_S)
                log = sidecar.log_since()  # before the receiver goes away again (a second outage)
    finally:
        sidecar.stop()
    # refused: counted failed (a push slower than the interval on a loaded machine is also "busy")
    assert down["failed"] >= 3, down
    assert log.count("otlp collector unavailable") == 1, log[-3000:]
    assert log.count("otlp collector back") == 1, log[-3000:]
    assert "ConnectionRefusedError" in log
