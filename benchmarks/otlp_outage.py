"""OTLP push vs ingest: does a down or slow collector slow ingest or ``/drain_margin``?

One command: ``.venv/bin/python -m benchmarks.otlp_outage`` (``--help`` for sizes; needs the
``otel`` extra). The real service runs in its own process (``rollout-sidecar serve``), once per
scenario and repeat, interleaved:

* ``off``: no OTLP push (the baseline);
* ``healthy``: pushing to a loopback receiver that answers at once;
* ``down``: pushing to a port nothing listens on (every push fails after the exporter's retries);
* ``slow``: pushing to a receiver that answers after 5 s, longer than the exporter's timeout;
* ``drip``: a receiver that sends ``HTTP/1.1 200 `` and then one byte every 100 ms for ever;
* ``huge``: a receiver that answers 200 with a 600 MB body.

Pushes every 100 ms (``OTEL_METRIC_EXPORT_INTERVAL=100``), 150x the default rate, to make the
push's cost visible; ``OTEL_EXPORTER_OTLP_TIMEOUT=2``. Each repeat posts the same generated
completions (16 per request, 4 concurrent posters) into a fresh run while one poller reads
``/drain_margin`` every 10 ms. Reported: median rows/s and its ratio to ``off``, median
drain-margin p50/p99, the pushes the service counted as sent and dropped (``failed`` /
``busy``), the service's peak RSS (``VmHWM``) and how long SIGTERM took to end it (a service
still alive after 10 s is killed and shows as 10+).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.baseline import quantile
from sidecar.demo.synthetic import SyntheticConfig, api_steps, generate_events
from tests.reliability_harness.sidecar_process import SidecarProcess

__all__ = ["completion_events", "post_load", "socketless_port"]  # what other benchmarks import

SCENARIOS = ("off", "healthy", "down", "slow", "drip", "huge")
HUGE_BYTES = 600 * 1000 * 1000
STOP_TIMEOUT_S = 10.0


class _Receiver:
    """Loopback OTLP/HTTP endpoint (bodies are not decoded here): ``answer`` "ok" answers 200 after
    ``delay_s``, "drip" drips a status line that never ends, "huge" answers a 600 MB body."""

    def __init__(self, delay_s: float, answer: str = "ok") -> None:
        delay = delay_s
        stopping = self.stopping = threading.Event()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("content-length", "0")))
                with contextlib.suppress(OSError):
                    if answer == "drip":
                        self.wfile.write(b"HTTP/1.1 200 ")
                        while not stopping.wait(0.1):
                            self.wfile.write(b"K")
                        return
                    if answer == "huge":
                        self.send_response(200)
                        self.send_header("content-length", str(HUGE_BYTES))
                        self.end_headers()
                        chunk, left = b"x" * (1 << 20), HUGE_BYTES
                        while left > 0 and not stopping.is_set():
                            self.wfile.write(chunk[:left])
                            left -= len(chunk)
                        return
                    time.sleep(delay)
                    self.send_response(200)
                    self.send_header("content-length", "0")
                    self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.stopping.set()
        self.server.shutdown()
        self.server.server_close()


def completion_events(count: int) -> list[dict[str, Any]]:
    config = SyntheticConfig(num_tasks=max(1, count // 4), repeats_per_task=4, payload_bytes_per_call=256)
    out = [step.event for step in api_steps(generate_events(config, 3)) if step.event["kind"] == "completed"]
    return out[:count]


async def post_load(url: str, run_id: str, events: list[dict[str, Any]]) -> tuple[float, list[float]]:
    """Rows/s of posting ``events`` with 4 posters, and drain-margin latencies meanwhile."""
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        start = {"kind": "run_started", "plan": None}
        assert (await client.post(f"/v1/runs/{run_id}/events", json=[start])).status_code == 200
        batches = [events[i : i + 16] for i in range(0, len(events), 16)]
        queue: asyncio.Queue[list[dict[str, Any]]] = asyncio.Queue()
        for batch in batches:
            queue.put_nowait(batch)
        latencies: list[float] = []
        done = asyncio.Event()

        async def poster() -> None:
            while not queue.empty():
                batch = queue.get_nowait()
                response = await client.post(f"/v1/runs/{run_id}/events", json=batch)
                assert response.status_code == 200, response.text

        async def poller() -> None:
            while not done.is_set():
                began = time.perf_counter()
                response = await client.get("/drain_margin", params={"run_id": run_id})
                latencies.append(time.perf_counter() - began)
                assert response.status_code == 200
                await asyncio.sleep(0.01)

        polling = asyncio.create_task(poller())
        began = time.perf_counter()
        await asyncio.gather(*(poster() for _ in range(4)))
        elapsed = time.perf_counter() - began
        done.set()
        await polling
    return len(events) / elapsed, latencies


def _pushes(url: str) -> tuple[float, float, float]:
    """Pushes sent, dropped as ``failed`` and dropped as ``busy``."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    sent = failed = busy = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rollout_sidecar_otlp_exports_total":
                sent += sample.value
            elif sample.name == "rollout_sidecar_otlp_exports_dropped_total":
                if sample.labels.get("reason") == "busy":
                    busy += sample.value
                else:
                    failed += sample.value
    return sent, failed, busy


def _peak_rss_mib(pid: int | None) -> float:
    """``VmHWM`` of ``pid`` in MiB (NaN where /proc is not there)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=4000, help="completions per repeat (default 4000)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per scenario (default 3)")
    args = parser.parse_args(argv)

    events = completion_events(args.events)
    receivers = {
        "healthy": _Receiver(0.0),
        "slow": _Receiver(5.0),
        "drip": _Receiver(0.0, "drip"),
        "huge": _Receiver(0.0, "huge"),
    }
    Row = tuple[float, float, float, float, float, float, float, float]
    results: dict[str, list[Row]] = {s: [] for s in SCENARIOS}
    with socketless_port() as dead_port:
        targets = {name: receiver.url for name, receiver in receivers.items()}
        targets["down"] = f"http://127.0.0.1:{dead_port}"
        with tempfile.TemporaryDirectory() as tmp:
            for repeat in range(args.repeats):
                for scenario in SCENARIOS:
                    extra = () if scenario == "off" else ("--otlp-endpoint", targets[scenario])
                    env = {"OTEL_METRIC_EXPORT_INTERVAL": "100", "OTEL_EXPORTER_OTLP_TIMEOUT": "2"}
                    sidecar = SidecarProcess(
                        Path(tmp) / f"{scenario}-{repeat}.sqlite3",
                        Path(tmp) / f"{scenario}-{repeat}.log",
                        extra_args=extra,
                        env=env,
                    )
                    url = sidecar.start()
                    try:
                        time.sleep(1.0)  # a few pushes (and failures) before the load
                        rate, latencies = asyncio.run(post_load(url, f"bench-{scenario}-{repeat}", events))
                        sent, failed, busy = _pushes(url)
                        rss = _peak_rss_mib(sidecar.pid)
                    finally:
                        began = time.perf_counter()
                        sidecar.stop(timeout=STOP_TIMEOUT_S)
                        stop_s = time.perf_counter() - began
                    p50, p99 = quantile(latencies, 0.5), quantile(latencies, 0.99)
                    results[scenario].append((rate, p50, p99, sent, failed, busy, rss, stop_s))
                    print(
                        f"  repeat {repeat + 1} {scenario:8s} {rate:8.0f} rows/s  drain_margin "
                        f"p50 {p50 * 1e3:.2f} ms p99 {p99 * 1e3:.2f} ms  pushes sent {sent:.0f} "
                        f"failed {failed:.0f} busy {busy:.0f}  peak RSS {rss:.0f} MiB  stop {stop_s:.2f} s",
                        flush=True,
                    )
    for receiver in receivers.values():
        receiver.close()
    base = statistics.median(r[0] for r in results["off"])
    print(f"\n{len(events)} completions per repeat, {args.repeats} repeats, medians:")
    header = (
        "scenario",
        "rows/s",
        "ratio",
        "dm p50 ms",
        "dm p99 ms",
        "sent",
        "failed",
        "busy",
        "RSS MiB",
        "stop s",
    )
    print("{:10s} {:>8s} {:>6s} {:>10s} {:>10s} {:>6s} {:>7s} {:>6s} {:>8s} {:>7s}".format(*header))
    for scenario in SCENARIOS:
        columns = zip(*results[scenario], strict=True)
        rate, p50, p99, sent, failed, busy, rss, stop_s = (statistics.median(column) for column in columns)
        print(
            f"{scenario:10s} {rate:8.0f} {rate / base:6.3f} {p50 * 1e3:10.2f} {p99 * 1e3:10.2f} "
            f"{sent:6.0f} {failed:7.0f} {busy:6.0f} {rss:8.0f} {stop_s:7.2f}"
        )
    return 0


@contextlib.contextmanager
def socketless_port() -> Any:
    """A loopback port that was free a moment ago and that nothing here listens on."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield port


if __name__ == "__main__":
    raise SystemExit(main())
