"""One bounded OTLP/HTTP POST against a real receiver: settings from the environment, each outcome,
a total deadline against a dripping answer and a capped read of a huge one."""

from __future__ import annotations

import pytest

from sidecar.export.otlp import (
    HttpSettings,
    OtlpConfigError,
    PushNotAccepted,
    http_settings,
    post,
)
from tests.dispatcher_client.support import free_port

from .otlp_receiver import OtlpReceiver

pytest.importorskip(
    "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2", reason="no opentelemetry-proto"
)

URL = "http://127.0.0.1:4318/v1/metrics"


def _body() -> bytes:
    from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
    from opentelemetry.proto.metrics.v1.metrics_pb2 import ResourceMetrics

    return ExportMetricsServiceRequest(resource_metrics=[ResourceMetrics()]).SerializeToString()


class TestHttpSettings:
    def test_defaults(self) -> None:
        assert http_settings(URL, {}) == HttpSettings(URL)

    def test_the_metrics_variable_wins_and_values_are_url_decoded(self) -> None:
        env = {
            "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20general",
            "OTEL_EXPORTER_OTLP_METRICS_HEADERS": "Authorization=Bearer%20t1, X-Tenant = a%2Cb ,",
            "OTEL_EXPORTER_OTLP_TIMEOUT": "3",
            "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
        }
        settings = http_settings(URL, env)
        assert settings.headers == (("authorization", "Bearer t1"), ("x-tenant", "a,b"))
        assert (settings.timeout_s, settings.gzip) == (3.0, True)

    @pytest.mark.parametrize(
        ("variable", "value", "message"),
        [
            ("OTEL_EXPORTER_OTLP_HEADERS", "novalue", "'novalue' is not a header"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "a b=c", "'a b=c' is not a header"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x=1%0D%0AEvil: 1", "line break"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x=" + "a" * 8193, "8193 characters, at most 8192"),
            ("OTEL_EXPORTER_OTLP_HEADERS", ",".join(f"h{i}=1" for i in range(65)), "65 headers, at most 64"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "soon", "must be seconds, got 'soon'"),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "0", r"must be in \(0, 600\] seconds, got '0'"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10000", "got '10000'"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", "must be gzip or none, got 'zstd'"),
            ("OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem", "no such file '/nonexistent/ca.pem'"),
        ],
    )
    def test_a_bad_value_names_its_variable(self, variable: str, value: str, message: str) -> None:
        with pytest.raises(OtlpConfigError, match=f"{variable}.*{message}"):
            http_settings(URL, {variable: value})


class TestPost:
    def test_sent_with_headers_and_gzip(self) -> None:
        receiver = OtlpReceiver()
        with receiver as url:
            env = {
                "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer%20t1",
                "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
            }
            post(http_settings(url + "/v1/metrics", env), _body())
            receiver.wait_for(1)
        assert receiver.headers[0]["authorization"] == "Bearer t1"
        assert receiver.headers[0]["content-encoding"] == "gzip"
        assert receiver.headers[0]["content-type"] == "application/x-protobuf"

    def test_an_error_answer_is_rejected_with_its_status(self) -> None:
        with OtlpReceiver(mode="fail") as url, pytest.raises(PushNotAccepted, match=r"^rejected: HTTP 400"):
            post(HttpSettings(url + "/v1/metrics"), _body())

    def test_a_refused_connection_is_unreachable(self) -> None:
        with pytest.raises(PushNotAccepted, match=r"^unreachable: .*(?i:refused)"):
            post(HttpSettings(f"http://127.0.0.1:{free_port()}/v1/metrics"), _body())

    def test_a_dripping_answer_ends_at_the_total_deadline(self) -> None:
        """One byte every 50 ms never lets a per-read timeout fire; the total deadline does."""
        receiver = OtlpReceiver(mode="drip", delay_s=0.05)
        with receiver as url, pytest.raises(PushNotAccepted, match=r"^timed_out: .*0\.5 s"):
            post(HttpSettings(url + "/v1/metrics", timeout_s=0.5), _body())

    def test_a_huge_answer_is_not_read(self) -> None:
        """A 2xx is decided by its status line; the client hangs up on the rest of a 256 MiB body."""
        size = 256 << 20
        receiver = OtlpReceiver(mode="huge", huge_bytes=size)
        with receiver as url:
            for _ in range(3):
                post(HttpSettings(url + "/v1/metrics"), _body())  # sent: no PushNotAccepted
        assert receiver.posts == 3
        assert receiver.written < size  # every answer was cut off by the client
