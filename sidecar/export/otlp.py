"""OTLP/HTTP push of the numbers ``/metrics`` shows, into an OpenTelemetry Collector.

One bounded POST per push on a fail-open thread, no retry: cumulative values lose nothing to a
dropped push. Names and settings: docs/operations.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gzip
import importlib.util
import math
import os
import socket
import ssl
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import structlog

from health.process_tuning import collector_paused
from sidecar.export import version
from sidecar.export.failopen import Deadline, FailOpenWorker, OutageLog

if TYPE_CHECKING:
    import httpcore
    from prometheus_client.core import Metric
    from prometheus_client.registry import CollectorRegistry


_log = structlog.get_logger("sidecar.export.otlp")

DEFAULT_INTERVAL_S = 15.0
DEFAULT_TIMEOUT_S = 10.0
PROTOCOL = "http/protobuf"
#: Bytes of an error answer kept for the log (a 2xx is decided by its status line alone).
MAX_RESPONSE_BYTES = 64 * 1024
RUN_ID_ATTRIBUTE = "rollout_sidecar.run_id"
_PREFIX = "rollout_sidecar_"
_UNITS = (("_seconds", "s"), ("_per_hour", "1/h"), ("_bytes", "By"))
_SERVICE_SUFFIX = "rollout-sidecar"
#: Slurm variable -> resource attribute, as nemo-lens 0.1.0 names them, then the two we add.
_SLURM = (
    ("SLURM_JOB_ID", "slurm.job.id"), ("SLURM_JOB_NAME", "slurm.job.name"),
    ("SLURM_NODELIST", "slurm.nodelist"), ("SLURM_NNODES", "slurm.nnodes"),
    ("SLURM_NTASKS", "slurm.ntasks"), ("SLURM_CLUSTER_NAME", "slurm.cluster.name"),
    ("SLURM_PROCID", "slurm.procid"), ("SLURM_NODEID", "slurm.nodeid"),
)  # fmt: skip
_GENERATED_RUN_ID = uuid.uuid4().hex[:12]


class OtlpConfigError(ValueError):
    """An OTLP setting is unusable; the message names it and where it came from."""


def _off(value: str) -> bool:
    return value.strip().lower() in ("0", "false", "no", "off")


# ---- where: flag and environment -----------------------------------------------------------


def otlp_available() -> bool:
    """True when the ``otel`` extra (SDK and the OTLP protobuf encoder) is installed."""
    try:
        names = ("opentelemetry.sdk.metrics", "opentelemetry.exporter.otlp.proto.common")
        return all(importlib.util.find_spec(name) is not None for name in names)
    except ModuleNotFoundError:  # a parent package is missing
        return False


def _check_url(url: str, where: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise OtlpConfigError(f"{where} must be an http(s) URL such as http://127.0.0.1:4318, got {url!r}")
    return url


def resolve_protocol(env: Mapping[str, str] | None = None) -> str:
    """``http/protobuf``, or :class:`OtlpConfigError` naming the variable that asks for another."""
    found = _env(os.environ if env is None else env, "PROTOCOL")
    if found is not None and found[1].lower() != PROTOCOL:
        raise OtlpConfigError(
            f"{found[0]}={found[1]!r}: the sidecar pushes {PROTOCOL} only "
            f"(set OTEL_EXPORTER_OTLP_METRICS_PROTOCOL={PROTOCOL} for it)"
        )
    return PROTOCOL


def resolve_endpoint(cli_endpoint: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The metrics URL to push to, or ``None`` (no push).

    ``--otlp-endpoint`` is a base URL (metrics go to ``<url>/v1/metrics``). Without it,
    ``NEMO_GYM_OTEL_ENABLED=1`` turns the push on (unless ``NEMO_GYM_OTEL_METRICS_ENABLED=0`` or
    ``NEMO_GYM_OTEL_EXPORTER`` is not ``otlp``): ``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`` as given,
    else ``OTEL_EXPORTER_OTLP_ENDPOINT`` plus ``/v1/metrics``, else the SDKs' ``localhost:4318``.
    """
    environ = os.environ if env is None else env
    if cli_endpoint:
        url = _check_url(cli_endpoint, "--otlp-endpoint").rstrip("/") + "/v1/metrics"
        resolve_protocol(environ)
        return url
    if environ.get("NEMO_GYM_OTEL_ENABLED", "").strip().lower() not in ("1", "true", "yes", "on"):
        return None
    if _off(environ.get("NEMO_GYM_OTEL_METRICS_ENABLED", "1")):
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
    return "http://localhost:4318/v1/metrics"


def resolve_interval(env: Mapping[str, str] | None = None) -> float:
    """Seconds between pushes: ``OTEL_METRIC_EXPORT_INTERVAL`` (milliseconds, as the SDK reads it)."""
    raw = (os.environ if env is None else env).get("OTEL_METRIC_EXPORT_INTERVAL", "").strip()
    if not raw:
        return DEFAULT_INTERVAL_S
    ms = _number(
        "OTEL_METRIC_EXPORT_INTERVAL", raw, "milliseconds", lambda v: 50 <= v <= 86_400_000, "50..86400000 ms"
    )
    return ms / 1000.0


def _number(variable: str, raw: str, unit: str, ok: Callable[[float], bool], bounds: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise OtlpConfigError(f"{variable} must be {unit}, got {raw!r}") from None
    if not (math.isfinite(value) and ok(value)):
        raise OtlpConfigError(f"{variable} must be in {bounds}, got {raw!r}")
    return value


@dataclass(frozen=True, slots=True)
class HttpSettings:
    """Where and how a push is sent (``OTEL_EXPORTER_OTLP_[METRICS_]*``; the metrics one wins)."""

    url: str
    headers: tuple[tuple[str, str], ...] = ()
    timeout_s: float = DEFAULT_TIMEOUT_S
    gzip: bool = False
    certificate: str | None = None
    client_certificate: str | None = None
    client_key: str | None = None


def _env(environ: Mapping[str, str], name: str) -> tuple[str, str] | None:
    for variable in (f"OTEL_EXPORTER_OTLP_METRICS_{name}", f"OTEL_EXPORTER_OTLP_{name}"):
        value = environ.get(variable, "").strip()
        if value:
            return variable, value
    return None


def _headers(variable: str, raw: str) -> tuple[tuple[str, str], ...]:
    """``k1=v1,k2=v2`` with URL-encoded values (the OTLP exporter's format)."""
    out = []
    for item in filter(str.strip, raw.split(",")):
        key, sep, value = item.partition("=")
        key, value = key.strip().lower(), unquote(value.strip())
        if not sep or not key or not key.isascii() or any(c in key for c in ' \t:\r\n()<>@,;\\"/[]?={}'):
            raise OtlpConfigError(f"{variable}: {item.strip()[:80]!r} is not a header such as key=value")
        if any(c in value for c in "\r\n\0"):
            raise OtlpConfigError(f"{variable}: the value of {key!r} holds a line break")
        if len(value) > 8192:
            raise OtlpConfigError(
                f"{variable}: the value of {key!r} has {len(value)} characters, at most 8192"
            )
        out.append((key, value))
    if len(out) > 64:
        raise OtlpConfigError(f"{variable}: {len(out)} headers, at most 64")
    return tuple(out)


def _file(found: tuple[str, str] | None) -> str | None:
    if found is not None and not os.path.isfile(found[1]):
        raise OtlpConfigError(f"{found[0]}: no such file {found[1]!r}")
    return None if found is None else found[1]


def http_settings(url: str, env: Mapping[str, str] | None = None) -> HttpSettings:
    """The settings of pushes to ``url`` from the ``OTEL_EXPORTER_OTLP_*`` variables."""
    environ = os.environ if env is None else env
    headers, timeout = _env(environ, "HEADERS"), _env(environ, "TIMEOUT")
    compression = _env(environ, "COMPRESSION")
    if compression is not None and compression[1].lower() not in ("gzip", "none"):
        raise OtlpConfigError(f"{compression[0]} must be gzip or none, got {compression[1]!r}")
    return HttpSettings(
        url=url,
        headers=_headers(*headers) if headers else (),
        timeout_s=_number(*timeout, "seconds", lambda v: 0 < v <= 600, "(0, 600] seconds")
        if timeout
        else DEFAULT_TIMEOUT_S,
        gzip=compression is not None and compression[1].lower() == "gzip",
        certificate=_file(_env(environ, "CERTIFICATE")),
        client_certificate=_file(_env(environ, "CLIENT_CERTIFICATE")),
        client_key=_file(_env(environ, "CLIENT_KEY")),
    )


# ---- the resource: NeMo Gym's names (0.7.0 on nemo-lens 0.1.0) ------------------------------


def _get(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name, "").strip()[:256]


def nemo_run_id(env: Mapping[str, str] | None = None) -> str:
    """``NEMO_GYM_OTEL_RUN_ID``, else ``SLURM_JOB_ID``, else this process's own (NeMo Gym's order)."""
    environ = os.environ if env is None else env
    return _get(environ, "NEMO_GYM_OTEL_RUN_ID") or _get(environ, "SLURM_JOB_ID") or _GENERATED_RUN_ID


def service_name(env: Mapping[str, str] | None = None) -> str:
    """``<OTEL_SERVICE_NAME or nemo-gym>/rollout-sidecar`` (the base alone when per-server names are off)."""
    environ = os.environ if env is None else env
    base = _get(environ, "OTEL_SERVICE_NAME") or "nemo-gym"
    per_server = not _off(environ.get("NEMO_GYM_OTEL_SERVICE_NAME_PER_SERVER", "1"))
    if not per_server or base.endswith("/" + _SERVICE_SUFFIX):
        return base
    return f"{base}/{_SERVICE_SUFFIX}"


def resource_attributes(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The push's resource attributes (NeMo Gym's names; the sidecar's run id is a point attribute)."""
    environ = os.environ if env is None else env
    run_id, host = nemo_run_id(environ), socket.gethostname()
    attributes = {
        "service.name": service_name(environ),
        "service.version": version(),
        "service.instance.id": f"{run_id}-{_SERVICE_SUFFIX}-{host}",
        "nemo.run.id": run_id,
        "host.name": host,
    }
    if _get(environ, "SLURM_JOB_ID"):
        attributes.update({attr: _get(environ, var) for var, attr in _SLURM if _get(environ, var)})
    return attributes


# ---- what: Prometheus families -> OTel metrics -----------------------------------------------


def otel_name(family: str) -> tuple[str, str]:
    """``(name, unit)`` of a Prometheus family name (without ``_total``)."""
    rest, unit = family.removeprefix(_PREFIX), ""
    for suffix, otel_unit in _UNITS:
        if rest.endswith(suffix):
            rest, unit = rest[: -len(suffix)], otel_unit
            break
    return "rollout_sidecar." + rest.replace("_", "."), unit


@dataclass(frozen=True, slots=True)
class SeriesTimes:
    """Where a series' cumulative start time and its histogram min/max come from."""

    start_of: Callable[[Mapping[str, str]], float]
    extremes_of: Callable[[str, Mapping[str, str]], tuple[float, float] | None]


def _attributes(labels: Mapping[str, str]) -> dict[str, str]:
    return {RUN_ID_ATTRIBUTE if key == "run_id" else key: value for key, value in labels.items()}


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


def to_metrics_data(families: Iterable[Metric], times: SeriesTimes, *, now: float, resource: Any) -> Any:
    """An OTel ``MetricsData`` of the collected Prometheus ``families`` at ``now``."""
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        Gauge,
        Histogram,
        MetricsData,
        NumberDataPoint,
        ResourceMetrics,
        ScopeMetrics,
        Sum,
    )
    from opentelemetry.sdk.metrics.export import Metric as OtelMetric
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    now_ns = _ns(now)

    def points(samples: Iterable[Any]) -> list[Any]:
        return [
            NumberDataPoint(_attributes(s.labels), _ns(times.start_of(s.labels)), now_ns, float(s.value))
            for s in samples
        ]

    metrics = []
    for family in families:
        name, unit = otel_name(family.name)
        data: Any = None
        if family.type == "counter":
            samples = [s for s in family.samples if s.name.endswith("_total")]
            data = Sum(points(samples), AggregationTemporality.CUMULATIVE, is_monotonic=True)
        elif family.type in ("gauge", "info"):
            name += ".info" if family.type == "info" else ""
            data = Gauge(points(family.samples))
        elif family.type == "summary":
            data = Gauge(points(s for s in family.samples if "quantile" in s.labels))
        elif family.type == "histogram":
            data = Histogram(_histogram_points(family, times, now_ns), AggregationTemporality.CUMULATIVE)
        if data is not None and data.data_points:
            metrics.append(OtelMetric(name, family.documentation, unit, data))
    scope = InstrumentationScope("rollout_sidecar", version())
    return MetricsData([ResourceMetrics(resource, [ScopeMetrics(scope, metrics, "")], "")])


def _histogram_points(family: Metric, times: SeriesTimes, now_ns: int) -> list[Any]:
    """Prometheus cumulative ``_bucket``/``_sum``/``_count`` samples -> per-bucket OTel points."""
    from opentelemetry.sdk.metrics.export import HistogramDataPoint

    series: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
    for sample in family.samples:
        labels = {k: v for k, v in sample.labels.items() if k != "le"}
        entry = series.setdefault(tuple(sorted(labels.items())), {"labels": labels, "buckets": []})
        if sample.name.endswith("_bucket"):
            entry["buckets"].append((float(sample.labels["le"]), sample.value))
        else:
            entry[sample.name.rpartition("_")[2]] = sample.value  # "sum" / "count"
    out = []
    for entry in series.values():
        buckets = sorted(entry["buckets"])
        cumulative = [count for _, count in buckets]
        counts = [int(c - before) for c, before in zip(cumulative, [0.0, *cumulative[:-1]], strict=True)]
        low, high = times.extremes_of(family.name, entry["labels"]) or (None, None)
        out.append(
            HistogramDataPoint(
                attributes=_attributes(entry["labels"]),
                start_time_unix_nano=_ns(times.start_of(entry["labels"])),
                time_unix_nano=now_ns,
                count=int(entry.get("count", cumulative[-1] if buckets else 0)),
                sum=entry.get("sum", 0.0),
                bucket_counts=counts,
                explicit_bounds=[bound for bound, _ in buckets if not math.isinf(bound)],
                min=low,  # type: ignore[arg-type]  # the SDK allows None: no min kept
                max=high,  # type: ignore[arg-type]
            )
        )
    return out


# ---- how: one bounded POST -------------------------------------------------------------------


class PushNotAccepted(Exception):
    """A push the collector did not take: ``rejected``, ``unreachable`` or ``timed_out`` and why."""


def _backend(deadline: Deadline) -> httpcore.SyncBackend:
    """httpcore's socket backend, each socket it opens watched by ``deadline``."""
    import httpcore

    class Watched(httpcore.SyncBackend):
        def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore.NetworkStream:
            stream = super().connect_tcp(*args, **kwargs)
            deadline.watch(stream.get_extra_info("socket"))
            return stream

    return Watched()


def post(settings: HttpSettings, body: bytes) -> None:
    """POST ``body`` within ``settings.timeout_s``; :class:`PushNotAccepted` unless answered 2xx."""
    import httpcore

    headers = [("Content-Type", "application/x-protobuf"), ("User-Agent", f"rollout-sidecar/{version()}")]
    headers += [("Content-Encoding", "gzip")] if settings.gzip else []
    payload = gzip.compress(body, compresslevel=6) if settings.gzip else body
    context = None
    if settings.url.startswith("https"):
        context = ssl.create_default_context(cafile=settings.certificate)
        if settings.client_certificate:
            context.load_cert_chain(settings.client_certificate, settings.client_key)
    deadline = Deadline(settings.timeout_s)
    try:
        timeouts = {name: deadline.left() for name in ("connect", "read", "write", "pool")}
        with (
            httpcore.ConnectionPool(ssl_context=context, network_backend=_backend(deadline)) as pool,
            pool.stream(
                "POST", settings.url, headers=[*headers, *settings.headers], content=payload,
                extensions={"timeout": timeouts},
            ) as response,
        ):  # fmt: skip
            if 200 <= response.status < 300:
                return
            text = b""
            for chunk in response.iter_stream():
                text += chunk
                if len(text) >= MAX_RESPONSE_BYTES:
                    break
            detail = text[:300].decode("utf-8", "replace").strip()
            problem = f"rejected: HTTP {response.status}: {detail}"[:300]
    except Exception as exc:
        if deadline.expired or isinstance(exc, TimeoutError | httpcore.TimeoutException):
            raise PushNotAccepted(f"timed_out: no complete answer within {settings.timeout_s:g} s") from None
        cause = exc.__context__ or exc
        raise PushNotAccepted(f"unreachable: {type(cause).__name__}: {cause}"[:300]) from None
    finally:
        deadline.cancel()
    raise PushNotAccepted(problem)


def _import_sender() -> None:
    import httpcore  # noqa: F401
    from opentelemetry.exporter.otlp.proto.common import metrics_encoder  # noqa: F401


class OtlpPusher:
    """Every ``interval_s``: collect ``registry`` off the loop while ingest waits on ``apply_lock`` (as
    a ``/metrics`` build does) and send it on a fail-open worker of one push."""

    def __init__(
        self,
        registry: CollectorRegistry,
        settings: HttpSettings,
        interval_s: float,
        times: SeriesTimes,
        *,
        on_result: Callable[[str], None],
        clock: Callable[[], float],
        apply_lock: asyncio.Lock,
    ) -> None:
        from opentelemetry.sdk.resources import Resource

        self.registry = registry
        self.settings = settings
        self.interval_s = interval_s
        self._times = times
        self._clock = clock
        self._on_result = on_result
        self._apply_lock = apply_lock
        self._resource = Resource.create(resource_attributes())
        self._outage = OutageLog(
            _log,
            down="otlp collector unavailable, pushes dropped until it answers",
            back="otlp collector back",
            stopped="otlp push stopped during an outage",
            endpoint=settings.url,
        )
        self._worker = FailOpenWorker("otlp-push", maxsize=1, on_result=on_result, outage=self._outage)
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="otlp-push")
        attributes, settings = self._resource.attributes, self.settings
        _log.info(
            "otlp push on", endpoint=settings.url, interval_s=self.interval_s, timeout_s=settings.timeout_s,
            service_name=attributes.get("service.name"), nemo_run_id=attributes.get("nemo.run.id"),
        )  # fmt: skip

    async def _run(self) -> None:
        await asyncio.to_thread(_import_sender)  # ~0.6 s cold, paid before the first push, off the loop
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                if not self._still_sending():
                    async with self._apply_lock:
                        data = await asyncio.to_thread(self._collect, True)
                    self._worker.submit(functools.partial(self._send, data))
            except Exception:  # a translation bug must not stop later pushes
                _log.exception("otlp push failed")
                self._on_result("failed")

    def _still_sending(self) -> bool:
        if self._worker.pending():
            self._worker.skip("busy")
            self._outage.dropped()
            return True
        return False

    def _collect(self, paused: bool = False) -> Any:
        """The registry as OTel data; ``paused``: the cyclic collector paused (it would hold the GIL)."""
        with collector_paused() if paused else contextlib.nullcontext():
            families = self.registry.collect()
            return to_metrics_data(families, self._times, now=self._clock(), resource=self._resource)

    def _send(self, data: Any) -> None:
        """On the sender thread; an encoding bug fails the push like an outage, never further."""
        from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics

        post(self.settings, encode_metrics(data).SerializeToString())

    async def stop(self) -> None:
        """Stop; one last push (a run's end reaches the collector), waited on at most 2 s."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        try:
            if not self._still_sending():
                self._worker.submit(functools.partial(self._send, self._collect()))
        except Exception:  # collecting at shutdown must not stop the shutdown
            _log.exception("final otlp push failed")
        wait = min(2.0, self.settings.timeout_s)
        if not await asyncio.to_thread(self._worker.stop, wait):
            _log.info("final otlp push not confirmed, not waited on", timeout_s=wait)
        self._outage.close()
