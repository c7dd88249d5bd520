"""MLflow / W&B export vs ingest: does a hung or down tracker slow ingest or ``/drain_margin``?

One command: ``.venv/bin/python -m benchmarks.tracker_outage`` (``--help`` for sizes; needs the
``mlflow`` extra, and ``wandb`` for the W&B scenario). The real service runs in its own process
(``rollout-sidecar serve``), once per scenario and repeat, interleaved:

* ``off``: no tracker (the baseline);
* ``mlflow-hang``: ``--mlflow-tracking-uri`` of a loopback server that accepts every connection
  and never answers (each call waits out the client's 10 s timeout);
* ``mlflow-down``: ``--mlflow-tracking-uri`` of a port nothing listens on (refused at once);
* ``wandb-hang``: ``--wandb-project`` online against a ``WANDB_BASE_URL`` that never answers
  (``wandb.init`` waits out its own timeout).

Live steps every 100 ms (``--tracker-interval 0.1``), 150x the default rate, to make the
export's cost visible. The load is ``benchmarks/otlp_outage.py``'s (the same completions, 16
per request, 4 concurrent posters, one ``/drain_margin`` poller every 10 ms), so the figures
compare. Reported: median rows/s and its ratio to ``off``, drain-margin p50/p99 and their ratio,
the service process's CPU milliseconds per 1,000 rows during the load (steadier than rates on a
shared machine), the jobs the service counted as sent and dropped, and how long ``SIGTERM`` took
to stop the service (it must not wait on the hung tracker beyond its 2 s deadline).
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import tempfile
import threading
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.baseline import quantile
from benchmarks.otlp_outage import completion_events, post_load, socketless_port
from sidecar.export.trackers import tracker_available
from tests.reliability_harness.proc_stats import cpu_seconds
from tests.reliability_harness.sidecar_process import SidecarProcess

SCENARIOS = ("off", "mlflow-hang", "mlflow-down", "wandb-hang")


class _Silent:
    """A loopback server that accepts connections, reads, and never answers."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(512)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


def _exports(url: str) -> tuple[float, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    sent = dropped = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "rollout_sidecar_tracker_exports_total":
                sent += sample.value
            elif sample.name == "rollout_sidecar_tracker_exports_dropped_total":
                dropped += sample.value
    return sent, dropped


def _scenario_args(scenario: str, silent: str, dead: str, tmp: Path) -> tuple[list[str], dict[str, str]]:
    env = {"MLFLOW_DISABLE_TELEMETRY": "true", "WANDB_SILENT": "true", "WANDB_DIR": str(tmp)}
    interval = ["--tracker-interval", "0.1"]
    if scenario == "mlflow-hang":
        return ["--mlflow-tracking-uri", silent, *interval], env
    if scenario == "mlflow-down":
        return ["--mlflow-tracking-uri", dead, *interval], env
    if scenario == "wandb-hang":
        env |= {"WANDB_MODE": "online", "WANDB_BASE_URL": silent, "WANDB_API_KEY": "x" * 40}
        return ["--wandb-project", "bench", *interval], env
    return [], env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--events", type=int, default=4000, help="completions per repeat (default 4000)")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per scenario (default 3)")
    args = parser.parse_args(argv)
    scenarios = [
        s
        for s in SCENARIOS
        if s == "off" or tracker_available("mlflow" if s.startswith("mlflow") else "wandb")
    ]
    events = completion_events(args.events)
    silent = _Silent()
    results: dict[str, list[tuple[float, ...]]] = {s: [] for s in scenarios}
    with socketless_port() as dead_port, tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for scenario in scenarios:
                extra, env = _scenario_args(scenario, silent.url, f"http://127.0.0.1:{dead_port}", Path(tmp))
                sidecar = SidecarProcess(
                    Path(tmp) / f"{scenario}-{repeat}.sqlite3",
                    Path(tmp) / f"{scenario}-{repeat}.log",
                    extra_args=extra,
                    env=env,
                )
                url = sidecar.start(timeout=60)
                try:
                    time.sleep(1.0)  # a few steps (and hangs) before the load
                    cpu_before = cpu_seconds(sidecar.pid)[0]
                    rate, latencies = asyncio.run(post_load(url, f"bench-{scenario}-{repeat}", events))
                    cpu_ms = (cpu_seconds(sidecar.pid)[0] - cpu_before) * 1e6 / len(events)
                    sent, dropped = _exports(url)
                finally:
                    began = time.perf_counter()
                    sidecar.stop()
                    stop_s = time.perf_counter() - began
                p50, p99 = quantile(latencies, 0.5), quantile(latencies, 0.99)
                results[scenario].append((rate, p50, p99, cpu_ms, sent, dropped, stop_s))
                print(
                    f"  repeat {repeat + 1} {scenario:12s} {rate:8.0f} rows/s  drain_margin "
                    f"p50 {p50 * 1e3:.2f} ms p99 {p99 * 1e3:.2f} ms  cpu {cpu_ms:.0f} ms/1k  "
                    f"jobs sent {sent:.0f} dropped {dropped:.0f}  stop {stop_s:.2f} s",
                    flush=True,
                )
    silent.close()
    base_rate = statistics.median(r[0] for r in results["off"])
    base_p99 = statistics.median(r[2] for r in results["off"])
    base_cpu = statistics.median(r[3] for r in results["off"])
    print(f"\n{len(events)} completions per repeat, {args.repeats} repeats, medians:")
    header = ("scenario", "rows/s", "ratio", "dm p50 ms", "dm p99 ms", "p99 ratio", "cpu/1k", "ratio")
    print("{:12s} {:>8s} {:>6s} {:>10s} {:>10s} {:>9s} {:>7s} {:>6s} {:>6s} {:>8s} {:>7s}".format(
        *header, "sent", "dropped", "stop s"))  # fmt: skip
    for scenario in scenarios:
        columns = zip(*results[scenario], strict=True)
        rate, p50, p99, cpu_ms, sent, dropped, stop_s = (statistics.median(column) for column in columns)
        print(
            f"{scenario:12s} {rate:8.0f} {rate / base_rate:6.3f} {p50 * 1e3:10.2f} {p99 * 1e3:10.2f} "
            f"{p99 / base_p99:9.3f} {cpu_ms:7.0f} {cpu_ms / base_cpu:6.3f} {sent:6.0f} {dropped:8.0f} "
            f"{stop_s:7.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
