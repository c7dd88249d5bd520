"""A real OTLP/HTTP metrics receiver on 127.0.0.1, and the collector's Prometheus translation.

The receiver decodes every ``POST /v1/metrics`` body as an ``ExportMetricsServiceRequest``
(``opentelemetry-proto``) and keeps it. :func:`as_prometheus` flattens a request the way the
OTel Collector's Prometheus exporter names series, written here independently of
``sidecar.export.otlp`` so the test checks the service's translation rather than repeating it.
"""

from __future__ import annotations

import contextlib
import gzip
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["OtlpReceiver", "Series", "as_prometheus"]

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]

_UNIT_SUFFIX = {"s": "_seconds", "1/h": "_per_hour", "By": "_bytes"}


class OtlpReceiver:
    """``with OtlpReceiver() as url``; ``mode`` "ok" answers 200, "fail" 400, "slow" waits ``delay_s``,
    "huge" answers 200 with a body of ``huge_bytes``, "drip" sends ``HTTP/1.1 200 `` and then one
    byte every ``delay_s`` for ever (the status line never ends). ``port`` 0: any free port."""

    def __init__(self, mode: str = "ok", delay_s: float = 0.0, *, huge_bytes: int = 0, port: int = 0) -> None:
        self.mode = mode
        self.delay_s = delay_s
        self.huge_bytes = huge_bytes
        self.requests: list[Any] = []
        self.headers: list[dict[str, str]] = []
        self.posts = 0
        #: Bytes of "huge" answers the receiver managed to write before the client hung up.
        self.written = 0
        self._stop = threading.Event()
        self._lock = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
                    ExportMetricsServiceRequest,
                    ExportMetricsServiceResponse,
                )

                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                if self.headers.get("content-encoding") == "gzip":
                    body = gzip.decompress(body)
                with receiver._lock:
                    receiver.posts += 1
                    receiver.headers.append({k.lower(): v for k, v in self.headers.items()})
                    receiver._lock.notify_all()
                if receiver.mode == "huge":
                    receiver._answer_huge(self)
                    return
                if receiver.mode == "drip":
                    receiver._drip(self)
                    return
                if receiver.mode == "slow":
                    time.sleep(receiver.delay_s)
                    with contextlib.suppress(OSError):  # the exporter has given up waiting
                        self.send_response(200)
                        self.end_headers()
                    return
                if self.path != "/v1/metrics" or receiver.mode == "fail":
                    self.send_response(400)
                    self.end_headers()
                    return
                request = ExportMetricsServiceRequest()
                request.ParseFromString(body)
                reply = ExportMetricsServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("content-type", "application/x-protobuf")
                self.send_header("content-length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)
                with receiver._lock:
                    receiver.requests.append(request)
                    receiver._lock.notify_all()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self._thread.start()
        return self.url

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.shutdown()
        self._server.server_close()

    def _answer_huge(self, handler: BaseHTTPRequestHandler) -> None:
        chunk = b"x" * (1 << 20)
        with contextlib.suppress(OSError):
            handler.send_response(200)
            handler.send_header("content-type", "application/x-protobuf")
            handler.send_header("content-length", str(self.huge_bytes))
            handler.end_headers()
            left = self.huge_bytes
            while left > 0 and not self._stop.is_set():
                part = chunk[: min(left, len(chunk))]
                handler.wfile.write(part)
                left -= len(part)
                with self._lock:
                    self.written += len(part)

    def _drip(self, handler: BaseHTTPRequestHandler) -> None:
        with contextlib.suppress(OSError):
            handler.wfile.write(b"HTTP/1.1 200 ")
            handler.wfile.flush()
            while not self._stop.wait(self.delay_s):
                handler.wfile.write(b"K")
                handler.wfile.flush()

    def wait_for_posts(self, count: int, timeout_s: float = 30.0) -> None:
        """Block until ``count`` POSTs arrived (whatever was answered)."""
        with self._lock:
            if not self._lock.wait_for(lambda: self.posts >= count, timeout_s):
                raise TimeoutError(f"{self.posts} OTLP posts after {timeout_s} s, wanted {count}")

    def wait_for(self, count: int, timeout_s: float = 30.0) -> Any:
        """Block until ``count`` requests arrived; returns the latest."""
        with self._lock:
            if not self._lock.wait_for(lambda: len(self.requests) >= count, timeout_s):
                raise TimeoutError(f"{len(self.requests)} OTLP requests after {timeout_s} s, wanted {count}")
            return self.requests[-1]


def _labels(attributes: Any) -> dict[str, str]:
    out = {}
    for attribute in attributes:
        key = "run_id" if attribute.key == "rollout_sidecar.run_id" else attribute.key.replace(".", "_")
        out[key] = attribute.value.string_value
    return out


def _value(point: Any) -> float:
    return float(point.as_double if point.HasField("as_double") else point.as_int)


def _le(bound: float) -> str:
    return "+Inf" if bound == float("inf") else repr(float(bound))


def as_prometheus(request: Any) -> Series:
    """Series name + labels -> value, as the collector's Prometheus exporter would name them."""
    out: Series = {}
    for resource in request.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                base = metric.name.replace(".", "_") + _UNIT_SUFFIX.get(metric.unit, "")
                kind = metric.WhichOneof("data")
                if kind == "sum":
                    for point in metric.sum.data_points:
                        out[(base + "_total", frozenset(_labels(point.attributes).items()))] = _value(point)
                elif kind == "gauge":
                    for point in metric.gauge.data_points:
                        out[(base, frozenset(_labels(point.attributes).items()))] = _value(point)
                elif kind == "histogram":
                    for point in metric.histogram.data_points:
                        labels = _labels(point.attributes)
                        running = 0
                        bounds = [*point.explicit_bounds, float("inf")]
                        for bound, count in zip(bounds, point.bucket_counts, strict=True):
                            running += count
                            key = frozenset({**labels, "le": _le(bound)}.items())
                            out[(base + "_bucket", key)] = float(running)
                        out[(base + "_sum", frozenset(labels.items()))] = point.sum
                        out[(base + "_count", frozenset(labels.items()))] = float(point.count)
    return out


def metric_named(request: Any, name: str) -> Any:
    """The one metric called ``name`` in a request."""
    found = [
        metric
        for resource in request.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == name
    ]
    assert len(found) == 1, (name, len(found))
    return found[0]
