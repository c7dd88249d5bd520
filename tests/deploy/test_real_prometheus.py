"""A real sidecar scraped by a real Prometheus on loopback, queried through Prometheus' HTTP API.

Checks the path operators depend on: the counters Prometheus stores equal the events sent, the
histogram aggregates to the sidecar's exact p75 within one bucket, the repository's rules evaluate
cleanly against live data, and every series the rules and the dashboard read exists.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
import yaml

from sidecar.state.durations import DURATION_BUCKETS
from tests.reliability_harness.sidecar_process import free_port
from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, api_steps, generate_events

from ._promql import SIDECAR_PREFIX, metric_names
from .conftest import RULE_FILES, dashboard_targets, rules_of

pytestmark = pytest.mark.timeout(60)

_RUN = "live-run"
_QUANTILE_RUN = "live-quantiles"
_T = TypeVar("_T")


def _wait_for(what: str, probe: Callable[[], _T | None], timeout: float = 20.0) -> _T:
    """Poll ``probe`` until it returns something other than ``None``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = probe()
        except httpx.TransportError:
            value = None
        if value is not None:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.25)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=15)


def _events(
    seed: int, *, failure_rate: float, drained_fraction: float
) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """A small generated run as API events: its plan and the completed/failed/drained events."""
    config = SyntheticConfig(
        num_tasks=10,
        repeats_per_task=3,
        model_calls_per_rollout=1,
        payload_bytes_per_call=64,
        faults=FaultRates(hollow_turn=0.15, failed_model_call=0.15, zero_completion_tokens=0.1),
        failure_rate=failure_rate,
        drained_fraction=drained_fraction,
        concurrency=4,
    )
    events = [step.event for step in api_steps(generate_events(config, seed))]
    return {str(task): config.repeats_per_task for task in range(config.num_tasks)}, events


class _Prometheus:
    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=10)

    def ready(self) -> bool | None:
        """``True`` once the TSDB is open (queries answer 503 before), else ``None``."""
        return self.client.get("/-/ready").status_code == 200 or None

    def query(self, expr: str) -> list[dict[str, Any]]:
        response = self.client.get("/api/v1/query", params={"query": expr})
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["status"] == "success", body
        result: list[dict[str, Any]] = body["data"]["result"]
        return result

    def scalar(self, expr: str) -> float:
        result = self.query(expr)
        assert len(result) == 1, f"{expr} returned {result}"
        return float(result[0]["value"][1])


@pytest.fixture(scope="module")
def binaries() -> tuple[str, str]:
    prometheus = shutil.which("prometheus")
    if prometheus is None:
        pytest.skip("prometheus not installed (apt-get install prometheus); .ci/run installs it")
    sidecar = Path(sys.executable).parent / "rollout-sidecar"
    if not sidecar.exists():
        pytest.fail(f"{sidecar} missing: pip install -e . first")
    return prometheus, str(sidecar)


@pytest.fixture(scope="module")
def live(binaries: tuple[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Feed the sidecar two runs, then let a real Prometheus scrape it; yields what was sent."""
    prometheus_bin, sidecar_bin = binaries
    tmp = tmp_path_factory.mktemp("live")
    sidecar_port = free_port()
    serve = ["serve", "--host", "127.0.0.1", "--port", str(sidecar_port), "--log-level", "warning"]
    serve += ["--journal", str(tmp / "journal.sqlite3")]
    sidecar = subprocess.Popen([sidecar_bin, *serve], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    processes = [sidecar]
    clients: list[httpx.Client] = []
    try:
        client = httpx.Client(base_url=f"http://127.0.0.1:{sidecar_port}", timeout=30)
        clients.append(client)
        _wait_for("the sidecar", lambda: True if client.get("/readyz").status_code == 200 else None)
        sent: dict[str, Counter[str]] = {}
        for run_id, seed, failure_rate, drained in ((_RUN, 3, 0.15, 0.1), (_QUANTILE_RUN, 4, 0.0, 0.0)):
            plan, events = _events(seed, failure_rate=failure_rate, drained_fraction=drained)
            start = {
                "kind": "run_started",
                "plan": plan,
                "dispatch_budget_s": 7200.0,
                "task_timeout_s": 3600.0,
            }
            batch = [start, *events]
            for at in range(0, len(batch), 25):
                response = client.post(f"/v1/runs/{run_id}/events", json=batch[at : at + 25])
                assert response.status_code == 200, response.text
            sent[run_id] = Counter(event["kind"] for event in batch)
        # One rejected request, so an ingest error is counted too.
        assert client.post(f"/v1/runs/{_RUN}/events", json=[{"kind": "nope"}]).status_code == 422

        prometheus_port = free_port()
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(path) for path in RULE_FILES],
            "scrape_configs": [
                {
                    "job_name": "rollout-sidecar",
                    "static_configs": [{"targets": [f"127.0.0.1:{sidecar_port}"]}],
                }
            ],
        }
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
        processes.append(
            subprocess.Popen(
                [
                    prometheus_bin,
                    f"--config.file={tmp / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prometheus_port}",
                    "--log.level=warn",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        prom = _Prometheus(f"http://127.0.0.1:{prometheus_port}")
        clients.append(prom.client)
        # Queries answer 503 until the TSDB is open (slow on a first start after installing).
        _wait_for("Prometheus to be ready", prom.ready, timeout=60.0)
        _wait_for("a successful scrape", lambda: prom.query('up{job="rollout-sidecar"} == 1') or None)
        # Two evaluations of every rule group after data arrived.
        time.sleep(2.5)
        yield {"prom": prom, "sent": sent, "sidecar": client}
    finally:
        for open_client in clients:
            open_client.close()
        for process in reversed(processes):
            _stop(process)


def _prom(live: dict[str, Any]) -> _Prometheus:
    prom: _Prometheus = live["prom"]
    return prom


class TestCountersMatchTheEventsSent:
    def test_outcome_counters(self, live: dict[str, Any]) -> None:
        prom = _prom(live)
        for run_id, sent in live["sent"].items():
            selector = f'{{run_id="{run_id}"}}'
            assert (
                prom.scalar(f"sum(rollout_sidecar_rollouts_completed_total{selector})") == sent["completed"]
            )
            assert prom.scalar(f"sum(rollout_sidecar_rollouts_drained_total{selector})") == sent["drained"]
            failed = prom.query(f"sum(rollout_sidecar_rollouts_failed_total{selector})")
            assert (float(failed[0]["value"][1]) if failed else 0.0) == sent["failed"]
        assert live["sent"][_RUN]["failed"] > 0 and live["sent"][_RUN]["drained"] > 0

    def test_ingest_counters(self, live: dict[str, Any]) -> None:
        prom = _prom(live)
        total: Counter[str] = Counter()
        for sent in live["sent"].values():
            total.update(sent)
        stored = {
            sample["metric"]["kind"]: float(sample["value"][1])
            for sample in prom.query('sum by (kind) (rollout_sidecar_ingest_events_total{result="accepted"})')
        }
        assert stored == {kind: float(count) for kind, count in total.items()}
        assert prom.query('rollout_sidecar_ingest_events_total{result="duplicate"} > 0') == []
        assert prom.scalar('rollout_sidecar_ingest_errors_total{reason="validation"}') == 1

    def test_histogram_count_is_every_observation(self, live: dict[str, Any]) -> None:
        prom = _prom(live)
        sent = live["sent"][_QUANTILE_RUN]
        count = prom.scalar(f'sum(rollout_sidecar_task_duration_seconds_count{{run_id="{_QUANTILE_RUN}"}})')
        assert count == sent["completed"]
        samples = prom.scalar(f'rollout_sidecar_tracker_samples{{run_id="{_QUANTILE_RUN}"}}')
        assert samples == sent["completed"]


class TestHistogramAgreesWithTheExactQuantile:
    def test_p75_within_one_bucket(self, live: dict[str, Any]) -> None:
        """Only completions in this run, so the histogram and the tracker hold the same samples."""
        prom = _prom(live)
        selector = f'{{run_id="{_QUANTILE_RUN}"}}'
        buckets = f"rollout_sidecar_task_duration_seconds_bucket{selector}"
        estimated = prom.scalar(f"histogram_quantile(0.75, sum by (le, run_id) ({buckets}))")
        exact = prom.scalar(
            f'rollout_sidecar_task_duration_quantile_seconds{{run_id="{_QUANTILE_RUN}",quantile="0.75"}}'
        )
        bounds = (0.0, *DURATION_BUCKETS)
        upper = next(i for i, bound in enumerate(bounds) if bound >= exact)
        width = bounds[upper] - bounds[upper - 1]
        assert abs(estimated - exact) <= width, (estimated, exact, width)

    def test_drain_margin_is_the_exact_p75(self, live: dict[str, Any]) -> None:
        """No configured margin: with 5+ samples the margin is the tracker's p75."""
        prom = _prom(live)
        margin = prom.scalar(f'rollout_sidecar_drain_margin_seconds{{run_id="{_QUANTILE_RUN}"}}')
        p75 = prom.scalar(
            f'rollout_sidecar_task_duration_quantile_seconds{{run_id="{_QUANTILE_RUN}",quantile="0.75"}}'
        )
        assert margin == p75


class TestRulesAndDashboardAgainstLiveSeries:
    def test_every_series_the_rules_and_dashboard_read_exists(
        self, live: dict[str, Any], dashboard: dict[str, Any]
    ) -> None:
        prom = _prom(live)
        response = prom.client.get("/api/v1/label/__name__/values")
        stored = set(response.json()["data"])
        exprs = [rule["expr"] for rule in rules_of("record") + rules_of("alert")]
        exprs += [target["expr"] for _, target in dashboard_targets(dashboard)]
        used = {name for expr in exprs for name in metric_names(expr) if name.startswith(SIDECAR_PREFIX)}
        assert used, "no sidecar series found in rules and dashboard"
        assert used - stored == set(), "panels or rules point at series the sidecar does not expose"

    def test_the_contract_list_matches_the_live_scrape(
        self, live: dict[str, Any], contract_names: list[str]
    ) -> None:
        prom = _prom(live)
        stored = {n for n in prom.client.get("/api/v1/label/__name__/values").json()["data"]}
        assert set(contract_names) - stored == set()

    def test_rules_evaluate_cleanly(self, live: dict[str, Any]) -> None:
        prom = _prom(live)
        groups = prom.client.get("/api/v1/rules").json()["data"]["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        assert len(rules) == len(rules_of("record")) + len(rules_of("alert"))
        broken = [(rule["name"], rule.get("lastError")) for rule in rules if rule["health"] != "ok"]
        assert broken == []

    def test_recorded_throughput_and_budget(self, live: dict[str, Any]) -> None:
        prom = _prom(live)
        left = prom.scalar(f'run_id:rollout_sidecar_budget_remaining_seconds{{run_id="{_RUN}"}}')
        assert 7000 < left <= 7200
        share = prom.scalar(f'run_id:rollout_sidecar_health_unhealthy:ratio{{run_id="{_RUN}"}}')
        verdicts = {
            s["metric"]["verdict"]: float(s["value"][1])
            for s in prom.query(f'rollout_sidecar_health_rollouts{{run_id="{_RUN}"}}')
        }
        assert verdicts["unhealthy"] > 0
        assert share == pytest.approx(verdicts["unhealthy"] / sum(verdicts.values()))

    def test_ingest_error_alert_fires_end_to_end(self, live: dict[str, Any]) -> None:
        """A rejected request while Prometheus watches: the alert (no ``for``) fires with its reason."""
        prom = _prom(live)
        assert prom.query('ALERTS{alertname="RolloutSidecarIngestErrors"}') == []
        response = live["sidecar"].get("/drain_margin", params={"run_id": "no-such-run"})
        assert response.status_code == 404
        firing = _wait_for(
            "RolloutSidecarIngestErrors to fire",
            lambda: prom.query('ALERTS{alertname="RolloutSidecarIngestErrors",alertstate="firing"}') or None,
            timeout=15,
        )
        assert [alert["metric"]["reason"] for alert in firing] == ["unknown_run"]
