"""Whether and where the OTLP push goes: the ``serve`` flag and the environment NeMo Gym sets.

Read once at start by ``serve`` (:mod:`sidecar.http.cli`); a setting that cannot work is an
:class:`OtlpConfigError` naming the variable or flag, so ``serve`` stops with a one-line message
instead of pushing nowhere. The push itself is :mod:`sidecar.export.otlp`.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Mapping
from urllib.parse import urlsplit

import structlog

from sidecar.export.otlp_transport import OtlpConfigError

__all__ = [
    "DEFAULT_INTERVAL_S",
    "PROTOCOL",
    "OtlpConfigError",
    "otlp_available",
    "resolve_endpoint",
    "resolve_interval",
    "resolve_protocol",
]

_log = structlog.get_logger("sidecar.export.otlp")

DEFAULT_INTERVAL_S = 15.0
#: The one OTLP protocol the push speaks.
PROTOCOL = "http/protobuf"
#: Where the OTel SDKs push http/protobuf when no endpoint variable is set.
_DEFAULT_ENDPOINT = "http://localhost:4318"
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
