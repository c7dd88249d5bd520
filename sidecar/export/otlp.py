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
  the collector's resource attributes; the resource is NeMo Gym's (``sidecar.export.otlp_resource``).

The OpenTelemetry packages are the optional extra ``otel`` and are imported only when a push
is configured. Pushing never blocks the event loop: the loop collects (a scrape's cost) and
the daemon thread of a :class:`~sidecar.export.failopen.FailOpenWorker` sends
(``sidecar.export.otlp_transport``:
a total deadline, a capped read); while a send is still running the next push is dropped and
counted ``busy``, a send that fails is counted ``failed``, and an outage is logged once when it
starts and once when it ends. Shutdown waits for the last push briefly and never past that.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

import structlog

from health.process_tuning import collector_paused
from sidecar.export.failopen import FailOpenWorker
from sidecar.export.otlp_resource import resource_attributes
from sidecar.export.otlp_transport import HttpSettings, SendOutcome, SendResult, post
from sidecar.export.outage import OutageLog

if TYPE_CHECKING:
    from prometheus_client.core import Metric
    from prometheus_client.registry import CollectorRegistry

__all__ = [
    "RUN_ID_ATTRIBUTE",
    "OtlpPusher",
    "PushNotAccepted",
    "SeriesTimes",
    "make_resource",
    "otel_name",
    "prometheus_name",
    "to_metrics_data",
]

_log = structlog.get_logger("sidecar.export.otlp")

RUN_ID_ATTRIBUTE = "rollout_sidecar.run_id"
_PREFIX = "rollout_sidecar_"
#: Prometheus unit suffix -> OTel (UCUM) unit; the collector translates them back.
_UNITS = (("_seconds", "s"), ("_per_hour", "1/h"), ("_bytes", "By"))
_SUFFIX_OF_UNIT = {unit: suffix for suffix, unit in _UNITS}


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


class PushNotAccepted(Exception):
    """A push the collector did not accept: its :class:`SendOutcome` and the detail for the log."""

    def __init__(self, result: SendResult) -> None:
        super().__init__(f"{result.outcome.value}: {result.detail}")
        self.result = result


class OtlpPusher:
    """Every ``interval_s``: collect ``registry`` and send it on a fail-open worker of one push.

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
        self._outage = OutageLog(
            _log,
            down="otlp collector unavailable, pushes dropped until it answers",
            back="otlp collector back",
            stopped="otlp push stopped during an outage",
            endpoint=settings.url,
        )
        # One push at a time: the queue holds one, and a push is only submitted to an idle worker.
        self._worker = FailOpenWorker("otlp-push", maxsize=1, on_result=on_result, outage=self._outage)
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
        if self._worker.pending():
            self._worker.skip("busy")
            self._outage.dropped()
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
        return self._worker.submit(lambda: self._send(data))

    def push(self) -> bool:
        """Collect now and hand the data to the sender thread; False (counted ``busy``) if it still sends."""
        if self._still_sending():
            return False
        data = self._collect()
        return self._worker.submit(lambda: self._send(data))

    def _send(self, data: Any) -> None:
        """On the sender thread; an encoding bug fails the push like an outage, never further."""
        from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

        result = self._send_fn(self.settings, encode_metrics(data).SerializeToString())
        if result.outcome is not SendOutcome.SENT:
            raise PushNotAccepted(result)

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
        wait = min(final_timeout_s, self.settings.timeout_s)
        if not await asyncio.to_thread(self._worker.stop, wait):
            _log.info("final otlp push not confirmed, not waited on", timeout_s=wait)
        self._outage.close()
