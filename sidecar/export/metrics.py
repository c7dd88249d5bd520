"""Prometheus exposition: run-scoped series built from the run states at scrape time (so a replay
rebuilds them and their label values stay bounded), plus the service's own counters.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, disable_created_metrics
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from health.registry import CHECK_IDS, TASK_CHECK_IDS
from sidecar.export import version
from sidecar.state.forecast import current
from sidecar.state.run import TOKEN_KINDS, RunState
from sidecar.wire import FollowerState

_P = "rollout_sidecar_"
_QUANTILES = (("0.5", 0.5), ("0.75", 0.75), ("0.95", 0.95))


#: Run-scoped families: key, type, name, help, labels after ``run_id`` (quantiles: a summary).
_KINDS: dict[str, Any] = {
    "c": CounterMetricFamily,
    "g": GaugeMetricFamily,
    "h": HistogramMetricFamily,
    "s": SummaryMetricFamily,
}
_RUN_FAMILIES: tuple[tuple[str, str, str, str, tuple[str, ...]], ...] = (
    ("completed", "c", "rollouts_completed", "Completion events accepted (duplicates ignored).", ()),
    ("failed", "c", "rollouts_failed",
     "Failed attempts by failure class (NeMo Gym's, or other) and terminal flag.",
     ("failure_class", "terminal")),
    ("drained", "c", "rollouts_drained", "Rollouts the dispatch budget never started.", ()),
    ("duration", "h", "task_duration_seconds", "Dispatched task duration by outcome.", ("outcome",)),
    ("quantile", "s", "task_duration_quantile_seconds",
     "Exact tracker quantiles of task duration (tracker samples and their sum as _count/_sum).", ()),
    ("samples", "g", "tracker_samples",
     "Samples in the latency tracker (completions plus counted failures).", ()),
    ("margin", "g", "drain_margin_seconds", "Tracker drain margin with the run's configured value.", ()),
    ("rate", "g", "rollouts_per_hour",
     "Completions per hour by when they happened, over the whole run and its last 15 minutes.", ("window",)),
    ("expected", "g", "rollouts_expected", "Planned rollouts (sum of repeats).", ()),
    ("pending", "g", "rollouts_pending",
     "Planned rollouts not yet succeeded, terminally failed or drained.", ()),
    ("deadline", "g", "budget_deadline_timestamp_seconds", "Unix time when the dispatch budget ends.", ()),
    ("timeout", "g", "task_timeout_seconds", "Per-task timeout declared at run start.", ()),
    ("verdicts", "g", "health_rollouts", "Rollouts by current health verdict.", ("verdict",)),
    ("findings", "g", "health_findings", "Current health finding counts per check.", ("check",)),
    ("closed", "g", "health_tasks_closed", "Tasks whose task-level checks ran.", ()),
    ("flags", "g", "health_task_flags", "Closed tasks flagged by each task check.", ("check",)),
    ("tokens", "c", "tokens", "Token sums from ng_perf.", ("kind",)),
    ("inflight", "g", "inflight_rollouts", "Rollouts started and not yet ended.", ()),
    ("inflight_oldest", "g", "inflight_oldest_age_seconds",
     "Age of the longest-running in-flight rollout (0: none).", ()),
    ("stragglers", "g", "inflight_stragglers", "In-flight rollouts older than the straggler threshold.", ()),
    ("stalled", "g", "inflight_stalled", "Heartbeating in-flight rollouts whose heartbeats stopped.", ()),
    ("untracked", "c", "inflight_untracked",
     "Started rollouts not tracked in flight: the run's cap or serve --max-inflight over all runs "
     "was reached.", ()),
    ("straggler_threshold", "g", "straggler_threshold_seconds",
     "Age past which an in-flight rollout straggles (+Inf: no rule).", ()),
    ("finished", "g", "forecast_finished",
     "Forecast: planned rollouts finished when the budget ends.", ("band",)),
    ("drained_forecast", "g", "forecast_drained", "Forecast: planned rollouts the budget never starts.",
     ("band",)),
    ("cut_off", "g", "forecast_cut_off", "Forecast: rollouts in flight when the budget ends.", ("band",)),
    ("eta_all_s", "g", "forecast_eta_seconds", "Forecast: seconds until every planned rollout ends.",
     ("band",)),
    ("budget_for_all_s", "g", "forecast_budget_for_all_seconds",
     "Forecast: the dispatch budget starting every planned rollout.", ()),
)  # fmt: skip


class _Families:
    """One scrape's run-scoped metric families, by key of :data:`_RUN_FAMILIES`."""

    def __init__(self) -> None:
        self.f: dict[str, Any] = {
            key: _KINDS[kind](_P + name, doc, labels=["run_id", *labels])
            for key, kind, name, doc, labels in _RUN_FAMILIES
        }

    def add(self, key: str, labels: list[str], value: float) -> None:
        self.f[key].add_metric(labels, value)

    def add_run(self, run: RunState) -> None:
        rid, add = run.run_id, self.add
        add("completed", [rid], run.completed)
        for (label, terminal), count in sorted(run.failed.items()):
            add("failed", [rid, label, "true" if terminal else "false"], count)
        add("drained", [rid], run.drained)
        for outcome, histogram in run.durations.items():
            self.f["duration"].add_metric([rid, outcome], histogram.cumulative(), histogram.total)
        self._add_tracker(run)
        if run.plan is not None:
            snapshot = run.accounting.snapshot(ended=run.ended)
            add("expected", [rid], snapshot.expected or 0)
            add("pending", [rid], snapshot.pending or 0)
        if run.budget_deadline is not None:
            add("deadline", [rid], run.budget_deadline)
        if run.config.task_timeout_s is not None:
            add("timeout", [rid], run.config.task_timeout_s)
        view = run.health_view()
        for verdict in ("healthy", "unhealthy", "unobserved"):
            add("verdicts", [rid, verdict], view.verdicts.get(verdict, 0))
        for check in CHECK_IDS:
            add("findings", [rid, check], view.issues.get(check, 0))
        add("closed", [rid], view.tasks_closed)
        for check in TASK_CHECK_IDS:
            add("flags", [rid, check], view.task_flags.get(check, 0))
        for kind in TOKEN_KINDS:
            add("tokens", [rid, kind], _counter_value(run.tokens[kind]))

    def _add_tracker(self, run: RunState) -> None:
        """The latency tracker's series: quantiles, samples, drain margin, completion rates."""
        rid, tracker, quantile = run.run_id, run.tracker, self.f["quantile"]
        if tracker.count:
            for label, q in _QUANTILES:
                value = tracker.quantile(q)
                if value is not None:
                    quantile.samples.append(Sample(quantile.name, {"run_id": rid, "quantile": label}, value))
            quantile.add_metric([rid], tracker.count, tracker.total_seconds)
        self.add("samples", [rid], tracker.count)
        margin = tracker.drain_margin(run.config.drain_margin_s)
        if margin is not None:
            self.add("margin", [rid], margin)
        for window, rate in zip(("run", "15m"), run.rates(), strict=True):
            if rate is not None:  # a run with no time to measure has no rate, not 0
                self.add("rate", [rid, window], rate)

    def add_inflight(self, run: RunState, now: float) -> None:
        rid, threshold = run.run_id, run.straggler_threshold()
        view = run.inflight.view(now, threshold)
        self.add("inflight", [rid], view.count)
        self.add("inflight_oldest", [rid], view.oldest_age_s or 0.0)
        self.add("stragglers", [rid], view.stragglers)
        self.add("stalled", [rid], view.stalled)
        self.add("untracked", [rid], view.untracked)
        if threshold is not None:  # no series before a rule applies: every sample stays finite
            self.add("straggler_threshold", [rid], threshold)

    def add_forecast(self, run: RunState, now: float) -> None:
        """The run's forecast (recomputed here at most every few seconds); no series while null."""
        body = current(run, now)
        if body is None:
            return
        end = body["by_budget_end"] or {}
        spreads = (("finished", end.get("finished")), ("drained_forecast", end.get("drained")),
                   ("cut_off", body["cut_off"]), ("eta_all_s", body["eta_all_s"]))  # fmt: skip
        for key, spread in spreads:
            for band, value in (spread or {}).items():
                self.add(key, [run.run_id, band], value)
        if body["budget_for_all_s"] is not None:
            self.add("budget_for_all_s", [run.run_id], body["budget_for_all_s"])


def _counter_value(total: int) -> float:
    """An ``int`` total as a finite sample: past the double range it saturates, never ``+Inf``."""
    try:
        return float(total)
    except OverflowError:
        return sys.float_info.max


#: States of ``serve --follow``'s follower, one series each (1 for the current state).
FOLLOWER_STATES = tuple(state.value for state in FollowerState)


@dataclass(frozen=True)
class _RunCollector(Collector):
    """Every run-scoped family of the current run states (none while the journal replays)."""

    _runs: Callable[[], Iterable[RunState]]
    _now: Callable[[], float]
    _ready: Callable[[], bool]
    _follower: Callable[[], dict[str, Any] | None]
    _retain_ended_s: float | None

    def collect(self) -> Iterator[Metric]:
        status = self._follower()
        if status is not None:
            state = GaugeMetricFamily(
                _P + "follower_state", "serve --follow: 1 for the follower's current state.", labels=["state"]
            )
            for name in FOLLOWER_STATES:
                state.add_metric([name], 1.0 if status.get("state") == name else 0.0)
            yield state
            yield CounterMetricFamily(
                _P + "follower_retries", "Follower restarts after a transient error.", value=status["retries"]
            )
        if not self._ready():
            yield GaugeMetricFamily(_P + "runs_active", "Runs currently held.", value=0)
            return
        runs = list(self._runs())
        if self._retain_ended_s is not None:
            cutoff = time.time() - self._retain_ended_s
            runs = [run for run in runs if run.ended_at is None or run.ended_at > cutoff]
        families = _Families()
        now = self._now()
        for run in runs:
            families.add_run(run)
            families.add_inflight(run, now)
            families.add_forecast(run, now)
        yield from families.f.values()
        yield GaugeMetricFamily(_P + "runs_active", "Runs currently held.", value=len(runs))


class ServiceMetrics:
    """The service's registry; every ``error_reasons`` series present from the start at 0."""

    def __init__(self, error_reasons: tuple[str, ...]) -> None:
        # ``*_created`` series double every counter's exposition for nothing (process-wide switch).
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = registry = CollectorRegistry(auto_describe=True)
        self.ingest_events = Counter(
            _P + "ingest_events", "Ingested events by kind and result.", ["kind", "result"], registry=registry
        )
        # Children by (kind, result): ``labels()`` per event costs more than the increment.
        self._event_counters: dict[tuple[str, str], Any] = {}
        self.ingest_errors = Counter(
            _P + "ingest_errors", "Rejected requests by reason.", ["reason"], registry=registry
        )
        self._error_reasons = error_reasons
        for reason in error_reasons:
            self.ingest_errors.labels(reason)
        self.commit_duration = Histogram(
            _P + "journal_commit_duration_seconds", "Journal group commit latency.", registry=registry,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
        )  # fmt: skip
        self.commit_batch = Histogram(
            _P + "journal_commit_batch_events", "Events per journal group commit.", registry=registry,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096),
        )  # fmt: skip
        self.last_commit = Gauge(
            _P + "journal_last_commit_timestamp_seconds", "Wall time of the last successful journal commit.",
            registry=registry,
        )  # fmt: skip
        Info(_P + "build", "Build information.", registry=registry).info({"version": version()})
        self.otlp_exports = Counter(
            _P + "otlp_exports", "OTLP metric pushes the collector accepted.", registry=registry
        )
        self.otlp_dropped = Counter(
            _P + "otlp_exports_dropped",
            "OTLP metric pushes dropped: the collector failed or was slow (failed), or the previous "
            "push was still being sent (busy).",
            ["reason"], registry=registry,
        )  # fmt: skip
        for reason in ("failed", "busy"):
            self.otlp_dropped.labels(reason)
        self.tracker_exports = Counter(
            _P + "tracker_exports", "MLflow / W&B jobs (live steps, final summaries) the tracker took.",
            ["tracker"], registry=registry,
        )  # fmt: skip
        self.tracker_dropped = Counter(
            _P + "tracker_exports_dropped",
            "MLflow / W&B jobs dropped: the tracker failed, refused or timed out (failed), the run's "
            "previous live step had not been taken yet (busy), the tracker is down and the step was "
            "not a retry (down), or the queue was full (queue_full).",
            ["tracker", "reason"], registry=registry,
        )  # fmt: skip

    def attach(
        self,
        runs: Callable[[], Iterable[RunState]],
        now: Callable[[], float],
        *,
        ready: Callable[[], bool] = lambda: True,
        follower: Callable[[], dict[str, Any] | None] = lambda: None,
        retain_ended_s: float | None = None,
    ) -> None:
        """Run-scoped families of ``runs()``; a run ended ``retain_ended_s`` ago leaves them."""
        self.registry.register(_RunCollector(runs, now, ready, follower, retain_ended_s))

    def on_event(self, kind: str, result: str, count: int = 1) -> None:
        """``count`` events of ``kind`` ended as ``result`` (one call per kind and result of a batch)."""
        counter = self._event_counters.get((kind, result))
        if counter is None:
            counter = self._event_counters[kind, result] = self.ingest_events.labels(kind, result)
        counter.inc(count)

    def on_otlp_result(self, result: str) -> None:
        """``sent`` | ``failed`` | ``busy`` (called from the push thread; client metrics are thread-safe)."""
        if result == "sent":
            self.otlp_exports.inc()
        else:
            self.otlp_dropped.labels(result).inc()

    def on_tracker_result(self, tracker: str, result: str) -> None:
        """``sent`` | ``failed`` | ``queue_full`` of one tracker job (called from any thread)."""
        if result == "sent":
            self.tracker_exports.labels(tracker).inc()
        else:
            self.tracker_dropped.labels(tracker, result).inc()

    def trackers_on(self, trackers: tuple[str, ...]) -> None:
        """Zero series for the configured trackers, so a dashboard sees 0 before the first drop."""
        for tracker in trackers:
            self.tracker_exports.labels(tracker)
            for reason in ("failed", "busy", "down", "queue_full"):
                self.tracker_dropped.labels(tracker, reason)

    def on_error(self, reason: str) -> None:
        self.ingest_errors.labels(reason if reason in self._error_reasons else "bad_request").inc()

    def on_commit(self, seconds: float, events: int) -> None:
        """Journal callback (may run on the journal's writer thread; client metrics are thread-safe)."""
        self.commit_duration.observe(seconds)
        self.commit_batch.observe(events)
        self.last_commit.set(time.time())


def render(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """Exposition bytes and content type, OpenMetrics when the scraper asks for it."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type
