"""OTLP/HTTP push of the numbers ``/metrics`` shows, into an OpenTelemetry Collector.

The source is the service's own Prometheus registry: every push collects it exactly as a
scrape does and translates each family, so a push and a scrape of the same state carry the
same values. Translation rules:

- names: ``rollout_sidecar_<rest>[_<unit>]`` becomes ``rollout_sidecar.<rest with dots>`` with
  the unit as the OTel unit (``_seconds`` -> ``s``, ``_per_hour`` -> ``1/h``, ``_bytes`` ->
  ``By``). The collector's Prometheus translation (dots to underscores, unit suffix, ``_total``
  on monotonic sums) gives back today's names: ``rollout_sidecar.task.duration`` (``s``) is
  ``rollout_sidecar_task_duration_seconds``;
- counters are cumulative monotonic sums, histograms cumulative with the Prometheus bucket
  bounds (plus min and max where the service keeps them), gauges gauges; the quantile summary
  becomes a gauge with a ``quantile`` attribute (its ``_count``/``_sum`` are the tracker
  samples and total, exported as such elsewhere), ``info`` a gauge of 1;
- the start time of a run's series is the run's start, so a restarted service that replays
  its journal continues the same cumulative series; the service's own series start when the
  process started (a restart is a reset, as in Prometheus);
- the ``run_id`` label becomes the ``rollout_sidecar.run_id`` attribute, leaving ``run_id`` to
  the collector's resource attributes; the resource is NeMo Gym's (``sidecar.otlp_resource``).

The OpenTelemetry packages are the optional extra ``otel`` and are imported only when a push
is configured. Pushing never blocks the event loop: the loop collects (a scrape's cost) and
one daemon thread sends (``sidecar.otlp_transport``: a total deadline, a capped read); while a
send is still running the next push is dropped and counted ``busy``, a send that fails is
counted ``failed``, and an outage is logged once when it starts and once when it ends.
Shutdown waits for the last push briefly and never past that: the thread is a daemon.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import importlib.util
import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import structlog

from health.process_tuning import collector_paused
from sidecar.otlp_resource import resource_attributes
from sidecar.otlp_transport import HttpSettings, OtlpConfigError, SendOutcome, SendResult, post

if TYPE_CHECKING:
    from prometheus_client.core import Metric
    from prometheus_client.registry import CollectorRegistry

__all__ = [
    "DEFAULT_INTERVAL_S",
    "PROTOCOL",
    "RUN_ID_ATTRIBUTE",
    "OtlpConfigError",
    "OtlpPusher",
    "SeriesTimes",
    "make_resource",
    "otel_name",
    "otlp_available",
    "prometheus_name",
    "resolve_endpoint",
    "resolve_interval",
    "resolve_protocol",
    "to_metrics_data",
]

_log = structlog.get_logger("sidecar.otlp")

DEFAULT_INTERVAL_S = 15.0
RUN_ID_ATTRIBUTE = "rollout_sidecar.run_id"
#: The one OTLP protocol the push speaks.
PROTOCOL = "http/protobuf"
#: Where the OTel SDKs push http/protobuf when no endpoint variable is set.
_DEFAULT_ENDPOINT = "http://localhost:4318"
_PREFIX = "rollout_sidecar_"
#: Prometheus unit suffix -> OTel (UCUM) unit; the collector translates them back.
_UNITS = (("_seconds", "s"), ("_per_hour", "1/h"), ("_bytes", "By"))
_SUFFIX_OF_UNIT = {unit: suffix for suffix, unit in _UNITS}
_NEMO_GYM_SWITCH = "NEMO_GYM_OTEL_ENABLED"


def otlp_available() -> bool:
    """True when the ``otel`` extra (SDK and the OTLP protobuf encoder) is installed."""
    try:
        return all(
            importlib.util.find_spec(name) is not None
            for name in ("opentelemetry.sdk.metrics", "opentelemetry.exporter.otlp.proto.common")
        )
    except ModuleNotFoundError:  # a parent package is missing
        return False


def otel_name(family: str) -> tuple[str, str]:
    """``(name, unit)`` of a Prometheus family name (without ``_total``)."""
    rest = family.removeprefix(_PREFIX)
    unit = ""
    for suffix, otel_unit in _UNITS:
        if rest.endswith(suffix):
            rest, unit = rest[: -len(suffix)], otel_unit
            break
    return "rollout_sidecar." + rest.replace("_", "."), unit


def prometheus_name(name: str, unit: str, *, monotonic_sum: bool = False) -> str:
    """The collector's Prometheus name of an OTel metric made by :func:`otel_name`."""
    base = name.replace(".", "_") + _SUFFIX_OF_UNIT.get(unit, "")
    return base + "_total" if monotonic_sum else base


def _check_url(url: str, where: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise OtlpConfigError(f"{where} must be an http(s) URL such as http://127.0.0.1:4318, got {url!r}")
    return url


def _on(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def resolve_protocol(env: Mapping[str, str] | None = None) -> str:
    """``http/protobuf``, or :class:`OtlpConfigError` naming the variable that asks for another."""
    environ = os.environ if env is None else env
    for variable in ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "OTEL_EXPORTER_OTLP_PROTOCOL"):
        value = environ.get(variable, "").strip()
        if value:
            if value.lower() != PROTOCOL:
                raise OtlpConfigError(
                    f"{variable}={value!r}: the sidecar pushes {PROTOCOL} only "
                    f"(set OTEL_EXPORTER_OTLP_METRICS_PROTOCOL={PROTOCOL} for it)"
                )
            return PROTOCOL
    return PROTOCOL


def resolve_endpoint(cli_endpoint: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The metrics URL to push to, or ``None`` (no push).

    ``--otlp-endpoint`` is an OTLP/HTTP base URL: metrics go to ``<url>/v1/metrics``. Without
    it, ``NEMO_GYM_OTEL_ENABLED=1`` turns the push on (unless ``NEMO_GYM_OTEL_METRICS_ENABLED=0``
    or ``NEMO_GYM_OTEL_EXPORTER`` is not ``otlp``) with the standard variables:
    ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` as given, else ``OTEL_EXPORTER_OTLP_ENDPOINT`` plus
    ``/v1/metrics``, else the SDKs' default ``http://localhost:4318/v1/metrics``. A push that is
    on checks the protocol (:func:`resolve_protocol`).
    """
    environ = os.environ if env is None else env
    if cli_endpoint:
        url = _check_url(cli_endpoint, "--otlp-endpoint").rstrip("/") + "/v1/metrics"
        resolve_protocol(environ)
        return url
    if not _on(environ.get(_NEMO_GYM_SWITCH, "")):
        return None
    if environ.get("NEMO_GYM_OTEL_METRICS_ENABLED", "1").strip().lower() in ("0", "false", "no", "off"):
        _log.info("otlp push off", reason="NEMO_GYM_OTEL_METRICS_ENABLED is off")
        return None
    exporter = environ.get("NEMO_GYM_OTEL_EXPORTER", "otlp").strip().lower() or "otlp"
    if exporter != "otlp":
        _log.info("otlp push off", reason=f"NEMO_GYM_OTEL_EXPORTER={exporter!r}, not otlp")
        return None
    resolve_protocol(environ)
    signal = environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "").strip()
    if signal:
        return _check_url(signal, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if base:
        return _check_url(base, "OTEL_EXPORTER_OTLP_ENDPOINT").rstrip("/") + "/v1/metrics"
    return _DEFAULT_ENDPOINT + "/v1/metrics"


def resolve_interval(env: Mapping[str, str] | None = None) -> float:
    """Seconds between pushes: ``OTEL_METRIC_EXPORT_INTERVAL`` (milliseconds, as the SDK reads it)."""
    environ = os.environ if env is None else env
    raw = environ.get("OTEL_METRIC_EXPORT_INTERVAL", "").strip()
    if not raw:
        return DEFAULT_INTERVAL_S
    try:
        millis = float(raw)
    except ValueError:
        raise OtlpConfigError(f"OTEL_METRIC_EXPORT_INTERVAL must be milliseconds, got {raw!r}") from None
    if not (math.isfinite(millis) and 50 <= millis <= 86_400_000):
        raise OtlpConfigError(f"OTEL_METRIC_EXPORT_INTERVAL must be in 50..86400000 ms, got {raw!r}")
    return millis / 1000.0


@dataclass(frozen=True, slots=True)
class SeriesTimes:
    """Where a series' cumulative start time and its histogram min/max come from."""

    #: Start (unix seconds) of a series by its Prometheus labels.
    start_of: Callable[[Mapping[str, str]], float]
    #: ``(min, max)`` of a histogram series, or ``None`` when the service does not keep them.
    extremes_of: Callable[[str, Mapping[str, str]], tuple[float, float] | None]


def _version() -> str:
    try:
        return metadata.version("rollout-sidecar")
    except metadata.PackageNotFoundError:
        return "unknown"


def make_resource(attributes: Mapping[str, str] | None = None) -> Any:
    """The OTel ``Resource`` of the pushes: ``attributes`` (default: NeMo Gym's, from the
    environment) over ``OTEL_RESOURCE_ATTRIBUTES``."""
    from opentelemetry.sdk.resources import Resource

    return Resource.create(dict(resource_attributes() if attributes is None else attributes))


def _attributes(labels: Mapping[str, str]) -> dict[str, str]:
    return {RUN_ID_ATTRIBUTE if key == "run_id" else key: value for key, value in labels.items()}


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def to_metrics_data(
    families: Iterable[Metric], times: SeriesTimes, *, now: float, resource: Any = None
) -> Any:
    """An OTel ``MetricsData`` of the collected Prometheus ``families`` at ``now``."""
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Gauge,
        Histogram,
        HistogramDataPoint,
        MetricsData,
        NumberDataPoint,
        ResourceMetrics,
        ScopeMetrics,
        Sum,
    )
    from opentelemetry.sdk.metrics.export import Metric as OtelMetric
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    cumulative = AggregationTemporality.CUMULATIVE
    now_ns = _ns(now)

    def point(sample: Any) -> Any:
        start = _ns(times.start_of(sample.labels))
        return NumberDataPoint(_attributes(sample.labels), start, now_ns, float(sample.value))

    metrics = []
    for family in families:
        name, unit = otel_name(family.name)
        data: Any = None
        if family.type == "counter":
            points = [point(s) for s in family.samples if s.name.endswith("_total")]
            data = Sum(points, cumulative, is_monotonic=True)
        elif family.type in ("gauge", "info"):
            if family.type == "info":
                name = name + ".info"
            data = Gauge([point(s) for s in family.samples])
        elif family.type == "summary":
            data = Gauge([point(s) for s in family.samples if "quantile" in s.labels])
        elif family.type == "histogram":
            data = Histogram(_histogram_points(family, times, now_ns, HistogramDataPoint), cumulative)
        if data is not None and data.data_points:
            metrics.append(OtelMetric(name, family.documentation, unit, data))
    if resource is None:
        resource = make_resource()
    scope = InstrumentationScope("rollout_sidecar", _version())
    return MetricsData([ResourceMetrics(resource, [ScopeMetrics(scope, metrics, "")], "")])


def _histogram_points(family: Metric, times: SeriesTimes, now_ns: int, point_type: Any) -> list[Any]:
    """Prometheus cumulative ``_bucket``/``_sum``/``_count`` samples -> per-bucket OTel points."""
    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for sample in family.samples:
        labels = {k: v for k, v in sample.labels.items() if k != "le"}
        entry = series.setdefault(tuple(sorted(labels.items())), {"labels": labels, "buckets": []})
        if sample.name.endswith("_bucket"):
            entry["buckets"].append((float(sample.labels["le"]), sample.value))
        elif sample.name.endswith("_sum"):
            entry["sum"] = sample.value
        elif sample.name.endswith("_count"):
            entry["count"] = sample.value
    points = []
    for entry in series.values():
        buckets = sorted(entry["buckets"])
        cumulative = [count for _, count in buckets]
        previous = [0.0, *cumulative[:-1]]
        counts = [int(count - before) for count, before in zip(cumulative, previous, strict=True)]
        bounds = [bound for bound, _ in buckets if not math.isinf(bound)]
        extremes = times.extremes_of(family.name, entry["labels"])
        points.append(
            point_type(
                attributes=_attributes(entry["labels"]),
                start_time_unix_nano=_ns(times.start_of(entry["labels"])),
                time_unix_nano=now_ns,
                count=int(entry.get("count", buckets[-1][1] if buckets else 0)),
                sum=entry.get("sum", 0.0),
                bucket_counts=counts,
                explicit_bounds=bounds,
                min=extremes[0] if extremes else None,
                max=extremes[1] if extremes else None,
            )
        )
    return points


class _Outage:
    """Logs an outage once when it starts and once when it ends, with the pushes it dropped."""

    def __init__(self, endpoint: str, clock: Callable[[], float] = time.monotonic) -> None:
        self._endpoint = endpoint
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None
        self._dropped = 0

    def record(self, result: SendResult) -> None:
        with self._lock:
            if result.outcome is SendOutcome.SENT:
                if self._since is not None:
                    _log.info(
                        "otlp collector back",
                        endpoint=self._endpoint,
                        outage_s=round(self._clock() - self._since, 3),
                        pushes_dropped=self._dropped,
                    )
                    self._since = None
                return
            if self._since is None:
                self._since, self._dropped = self._clock(), 0
                _log.warning(
                    "otlp collector unavailable, pushes dropped until it answers",
                    endpoint=self._endpoint,
                    outcome=result.outcome.value,
                    detail=result.detail,
                )
            self._dropped += 1

    def busy(self) -> None:
        with self._lock:
            if self._since is not None:
                self._dropped += 1

    def close(self) -> None:
        with self._lock:
            if self._since is not None:
                _log.warning(
                    "otlp push stopped during an outage",
                    endpoint=self._endpoint,
                    outage_s=round(self._clock() - self._since, 3),
                    pushes_dropped=self._dropped,
                )
                self._since = None


class OtlpPusher:
    """Every ``interval_s``: collect ``registry``, send from one daemon thread.

    With ``apply_lock`` (the service's), the periodic collection runs on a worker thread while
    ingest waits, as a ``/metrics`` build does: a collection reads every run's health view, which
    falls back to a whole summary when a run has duplicate identities, so on the loop it could hold
    ``/drain_margin`` for tens of milliseconds. Without it (tests, the final push at shutdown) it
    runs where it is called.
    """

    def __init__(
        self,
        registry: CollectorRegistry,
        settings: HttpSettings,
        interval_s: float,
        times: SeriesTimes,
        *,
        on_result: Callable[[str], None],
        resource: Mapping[str, str] | None = None,
        send: Callable[[HttpSettings, bytes], SendResult] = post,
        clock: Callable[[], float] = time.time,
        apply_lock: asyncio.Lock | None = None,
    ) -> None:
        self.registry = registry
        self._apply_lock = apply_lock
        self.settings = settings
        self.endpoint = settings.url
        self.interval_s = interval_s
        self._times = times
        self._clock = clock  # the clock run start times are read on
        self._on_result = on_result  # "sent" | "failed" | "busy"
        self._send_fn = send
        self._resource = make_resource(resource)
        self._outage = _Outage(settings.url)
        self._sending: concurrent.futures.Future[None] | None = None  # done when the send ended
        self._task: asyncio.Task[None] | None = None

    @property
    def resource_attributes(self) -> dict[str, Any]:
        return dict(self._resource.attributes)

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="otlp-push")
        _log.info(
            "otlp push on",
            endpoint=self.endpoint,
            interval_s=self.interval_s,
            timeout_s=self.settings.timeout_s,
            service_name=self._resource.attributes.get("service.name"),
            nemo_run_id=self._resource.attributes.get("nemo.run.id"),
        )

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                await self._push_collected_off_loop()
            except Exception:  # a translation bug must not stop later pushes
                _log.exception("otlp push failed")
                self._on_result("failed")

    def _still_sending(self) -> bool:
        if self._sending is not None and not self._sending.done():
            self._on_result("busy")
            self._outage.busy()
            return True
        return False

    def _collect(self) -> Any:
        families = self.registry.collect()
        return to_metrics_data(families, self._times, now=self._clock(), resource=self._resource)

    def _collect_paused(self) -> Any:
        """:meth:`_collect` with the cyclic collector paused (in a ``serve`` process), as a
        ``/metrics`` build is: its allocations would otherwise trigger a pass that holds the GIL."""
        with collector_paused():
            return self._collect()

    async def _push_collected_off_loop(self) -> bool:
        """:meth:`push`, the collection on a worker thread serialized with ingest (``apply_lock``)."""
        if self._apply_lock is None:
            return self.push()
        if self._still_sending():
            return False
        async with self._apply_lock:
            data = await asyncio.to_thread(self._collect_paused)
        return self._hand_over(data)

    def push(self) -> bool:
        """Collect now and hand the data to a sender thread; False (counted ``busy``) if one still sends."""
        if self._still_sending():
            return False
        return self._hand_over(self._collect())

    def _hand_over(self, data: Any) -> bool:
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._sending = done
        threading.Thread(target=self._send, args=(data, done), name="otlp-push", daemon=True).start()
        return True

    def _send(self, data: Any, done: concurrent.futures.Future[None]) -> None:
        from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

        try:
            try:
                result = self._send_fn(self.settings, encode_metrics(data).SerializeToString())
            except Exception as exc:  # an encoding bug is counted and logged like an outage, never raised
                result = SendResult(SendOutcome.REJECTED, f"{type(exc).__name__}: {exc}"[:300])
            self._on_result("sent" if result.outcome is SendOutcome.SENT else "failed")
            self._outage.record(result)
        finally:
            done.set_result(None)

    async def stop(self, final_timeout_s: float = 2.0) -> None:
        """Stop pushing; one last push (so the end of a run reaches the collector), waited on at
        most ``final_timeout_s`` and never past it: the sender is a daemon thread with its own deadline."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        try:
            self.push()
        except Exception:  # collecting at shutdown must not stop the shutdown
            _log.exception("final otlp push failed")
        if self._sending is not None:
            wait = min(final_timeout_s, self.settings.timeout_s)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(self._sending)), wait)
            if not self._sending.done():
                _log.info("final otlp push not confirmed, not waited on", timeout_s=wait)
        self._outage.close()
