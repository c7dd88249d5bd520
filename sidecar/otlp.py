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
  the collector's resource attributes.

The OpenTelemetry packages are the optional extra ``otel`` and are imported only when a push
is configured. Pushing never blocks the event loop: the loop collects (a scrape's cost) and
one worker thread sends; while a send is still running the next push is dropped and counted.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib.util
import math
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import structlog

if TYPE_CHECKING:
    from prometheus_client.core import Metric
    from prometheus_client.registry import CollectorRegistry

__all__ = [
    "DEFAULT_INTERVAL_S",
    "RUN_ID_ATTRIBUTE",
    "OtlpConfigError",
    "OtlpPusher",
    "SeriesTimes",
    "otel_name",
    "otlp_available",
    "prometheus_name",
    "resolve_endpoint",
    "resolve_interval",
    "to_metrics_data",
]

_log = structlog.get_logger("sidecar.otlp")

DEFAULT_INTERVAL_S = 15.0
RUN_ID_ATTRIBUTE = "rollout_sidecar.run_id"
SERVICE_NAME = "rollout-sidecar"
_PREFIX = "rollout_sidecar_"
#: Prometheus unit suffix -> OTel (UCUM) unit; the collector translates them back.
_UNITS = (("_seconds", "s"), ("_per_hour", "1/h"), ("_bytes", "By"))
_SUFFIX_OF_UNIT = {unit: suffix for suffix, unit in _UNITS}
_NEMO_GYM_SWITCH = "NEMO_GYM_OTEL_ENABLED"


class OtlpConfigError(ValueError):
    """An OTLP setting is unusable; the message names it and where it came from."""


def otlp_available() -> bool:
    """True when the ``otel`` extra (SDK and OTLP/HTTP exporter) is installed."""
    try:
        return all(
            importlib.util.find_spec(name) is not None
            for name in ("opentelemetry.sdk.metrics", "opentelemetry.exporter.otlp.proto.http")
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


def resolve_endpoint(cli_endpoint: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The metrics URL to push to, or ``None`` (no push).

    ``--otlp-endpoint`` is an OTLP/HTTP base URL: metrics go to ``<url>/v1/metrics``. Without
    it, ``NEMO_GYM_OTEL_ENABLED=1`` turns the push on with the standard variables:
    ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` as given, else ``OTEL_EXPORTER_OTLP_ENDPOINT``
    plus ``/v1/metrics``.
    """
    environ = os.environ if env is None else env
    if cli_endpoint:
        return _check_url(cli_endpoint, "--otlp-endpoint").rstrip("/") + "/v1/metrics"
    if environ.get(_NEMO_GYM_SWITCH, "").strip().lower() not in ("1", "true", "yes"):
        return None
    signal = environ.get("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "").strip()
    if signal:
        return _check_url(signal, "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT")
    base = environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    if base:
        return _check_url(base, "OTEL_EXPORTER_OTLP_ENDPOINT").rstrip("/") + "/v1/metrics"
    return None


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


def _attributes(labels: Mapping[str, str]) -> dict[str, str]:
    return {RUN_ID_ATTRIBUTE if key == "run_id" else key: value for key, value in labels.items()}


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def to_metrics_data(families: Iterable[Metric], times: SeriesTimes, *, now: float) -> Any:
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
    from opentelemetry.sdk.resources import Resource
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
    release = _version()
    resource = Resource.create({"service.name": SERVICE_NAME, "service.version": release})
    scope = InstrumentationScope("rollout_sidecar", release)
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


class OtlpPusher:
    """Every ``interval_s``: collect ``registry`` on the loop, send from one worker thread."""

    def __init__(
        self,
        registry: CollectorRegistry,
        endpoint: str,
        interval_s: float,
        times: SeriesTimes,
        *,
        on_result: Callable[[str], None],
        exporter: Any = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

        self.registry = registry
        self.endpoint = endpoint
        self.interval_s = interval_s
        self._times = times
        self._clock = clock  # the clock run start times are read on
        self._on_result = on_result  # "sent" | "failed" | "busy"
        self._exporter = exporter if exporter is not None else OTLPMetricExporter(endpoint=endpoint)
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="otlp-push")
        self._sending: concurrent.futures.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="otlp-push")
        _log.info("otlp push on", endpoint=self.endpoint, interval_s=self.interval_s)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.push()
            except Exception:  # a translation bug must not stop later pushes
                _log.exception("otlp push failed")
                self._on_result("failed")

    def push(self) -> bool:
        """Collect now and hand the data to the worker; False (counted ``busy``) if it is still sending."""
        if self._sending is not None and not self._sending.done():
            self._on_result("busy")
            return False
        data = to_metrics_data(self.registry.collect(), self._times, now=self._clock())
        self._sending = self._pool.submit(self._send, data)
        return True

    def _send(self, data: Any) -> None:
        from opentelemetry.sdk.metrics.export import MetricExportResult

        try:
            result = self._exporter.export(data)
        except Exception as exc:  # the exporter logs and returns FAILURE; anything else is counted too
            _log.warning("otlp export raised", error=f"{type(exc).__name__}: {exc}"[:300])
            result = None
        ok = result == MetricExportResult.SUCCESS
        self._on_result("sent" if ok else "failed")

    async def stop(self, final_timeout_s: float = 2.0) -> None:
        """Stop pushing; one last push (so the end of a run reaches the collector), waited on briefly."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        try:
            if self.push() and self._sending is not None:
                await asyncio.wait_for(asyncio.wrap_future(self._sending), final_timeout_s)
        except Exception:  # a collector that does not answer at shutdown is not an error
            _log.info("final otlp push not confirmed", timeout_s=final_timeout_s)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._exporter.shutdown(timeout_millis=500)
