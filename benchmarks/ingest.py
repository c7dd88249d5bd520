"""Ingest benchmark: the real service in its own process, loaded over loopback HTTP.

One command: ``.venv/bin/python benchmarks/ingest.py`` (``--help`` for sizes). It starts
``rollout-sidecar serve`` on an ephemeral port with a fresh journal, then measures:

* baseline: ``GET /healthz`` at the same concurrency (the HTTP stack's own ceiling);
* sustained durable ingest: concurrent clients post completions of generated ~8 KB rows,
  one event per request (and batched, as ``dispatcher_client`` does); rows/s is the median
  of ``--repeats`` runs, with the ratio to the baseline;
* acknowledgement latency p50/p99 at an offered 200 rows/s (open loop);
* ``GET /drain_margin`` p50/p99 at an offered 1,000 requests/s (open loop);
* resident memory per rollout held: RSS growth of the service process per ingested row,
  after warm-up, extrapolated to 100k rollouts.

Targets (issue 4, 2-core machine): >= 1,500 rows/s durable, p99 ack < 50 ms at 200 rows/s,
drain_margin p99 < 2 ms at 1,000 req/s, < 1 KB resident per processed rollout. The client is a
minimal keep-alive HTTP/1.1 client on asyncio streams so that it costs the shared CPUs little.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from anywhere

from benchmarks.baseline import quantile
from sidecar.demo.synthetic import SyntheticConfig, generate_rows
from tests.reliability_harness.proc_stats import cpu_seconds, resident_bytes
from tests.reliability_harness.sidecar_process import SidecarProcess, free_port

__all__ = ["Bench"]  # what other benchmarks import


class RawClient:
    """One keep-alive HTTP/1.1 connection; enough of the protocol for this service's replies."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(self.host, self.port)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        status, reply, _ = await self.timed_request(method, path, body)
        return status, reply

    async def timed_request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes, float]:
        """Also returns the service's own handling time in seconds (its ``Server-Timing`` header)."""
        assert self.reader is not None and self.writer is not None
        head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
        self.writer.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        raw = await self.reader.readuntil(b"\r\n\r\n")
        lines = raw.split(b"\r\n")
        status = int(lines[0].split()[1])
        length = 0
        server = float("nan")
        for line in lines[1:]:
            name = line[:15].lower()
            if name == b"content-length:":
                length = int(line[15:])
            elif name == b"server-timing: ":
                server = float(line.split(b"dur=")[1]) / 1000.0
        return status, await self.reader.readexactly(length), server

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


class Bench:
    def __init__(self, port: int, rows: list[dict[str, Any]]) -> None:
        self.port = port
        self.rows = rows
        self.next_task = 0

    def body(self, run_id: str, count: int) -> bytes:
        events = []
        for _ in range(count):
            index = self.next_task
            self.next_task += 1
            row = dict(self.rows[index % len(self.rows)])
            row["_ng_task_index"] = index
            row["_ng_rollout_index"] = 0
            events.append({"kind": "completed", "seconds": 1.0 + index % 600, "row": row})
        return orjson.dumps(events)

    async def clients(self, n: int) -> list[RawClient]:
        out = [RawClient("127.0.0.1", self.port) for _ in range(n)]
        await asyncio.gather(*(c.connect() for c in out))
        return out

    async def start_run(self, run_id: str) -> None:
        (client,) = await self.clients(1)
        status, body = await client.request("POST", f"/v1/runs/{run_id}/events", b'[{"kind":"run_started"}]')
        assert status == 200, body
        await client.close()

    async def closed_loop(
        self, concurrency: int, total: int, make: Callable[[RawClient], Awaitable[None]]
    ) -> float:
        """Run ``total`` requests over ``concurrency`` connections; returns the elapsed seconds."""
        clients = await self.clients(concurrency)
        remaining = total

        async def worker(client: RawClient) -> None:
            nonlocal remaining
            while remaining > 0:
                remaining -= 1
                await make(client)

        started = time.perf_counter()
        await asyncio.gather(*(worker(c) for c in clients))
        elapsed = time.perf_counter() - started
        await asyncio.gather(*(c.close() for c in clients))
        return elapsed

    async def open_loop(
        self, rate: float, seconds: float, make: Callable[[RawClient], Awaitable[float]], pool: int = 64
    ) -> tuple[list[float], list[float]]:
        """Offer ``rate`` requests/s for ``seconds``; returns client and server latencies (s)."""
        clients = await self.clients(pool)
        idle: asyncio.Queue[RawClient] = asyncio.Queue()
        for client in clients:
            idle.put_nowait(client)
        latencies: list[float] = []
        server: list[float] = []

        async def one() -> None:
            client = await idle.get()
            started = time.perf_counter()
            server.append(await make(client))
            latencies.append(time.perf_counter() - started)
            idle.put_nowait(client)

        tasks = []
        begin = time.perf_counter()
        count = int(rate * seconds)
        for i in range(count):
            delay = begin + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        await asyncio.gather(*(c.close() for c in clients))
        return latencies, server


async def throughput_async(
    args: argparse.Namespace, port: int, pid: int, rows: list[dict[str, Any]], repeat: int
) -> dict[str, tuple[float, ...]]:
    """One round: healthz baseline, then ingest at 1 and ``--batch`` events per request.

    Returns ``{phase: (per_second, p50_s, p99_s, service_cpu_s_per_row, worker_cpu_s_per_row)}``;
    CPU time per row is what a shared machine's contention does not inflate much.
    """
    bench = Bench(port, rows)
    out: dict[str, tuple[float, ...]] = {}

    async def healthz(client: RawClient) -> None:
        status, _ = await client.request("GET", "/healthz")
        assert status == 200

    elapsed = await bench.closed_loop(args.clients, args.rows, healthz)
    out["healthz"] = (args.rows / elapsed, float("nan"), float("nan"))
    for batch in (1, args.batch):
        run_id = f"tput-b{batch}-{repeat}"
        await bench.start_run(run_id)
        latencies: list[float] = []

        async def post(
            client: RawClient, run_id: str = run_id, batch: int = batch, latencies: list[float] = latencies
        ) -> None:
            body = bench.body(run_id, batch)
            started = time.perf_counter()
            status, reply = await client.request("POST", f"/v1/runs/{run_id}/events", body)
            latencies.append(time.perf_counter() - started)
            assert status == 200, reply[:200]

        cpu_before = cpu_seconds(pid)
        elapsed = await bench.closed_loop(args.clients, args.rows // batch, post)
        cpu_after = cpu_seconds(pid)
        count = args.rows // batch * batch
        out[f"batch{batch}"] = (
            count / elapsed,
            quantile(latencies, 0.5),
            quantile(latencies, 0.99),
            (cpu_after[0] - cpu_before[0]) / count,
            (cpu_after[1] - cpu_before[1]) / count,
        )
    return out


async def latency_async(args: argparse.Namespace, port: int, rows: list[dict[str, Any]]) -> None:
    """Open-loop ack latency at 200 rows/s, then /drain_margin latency at 1,000 req/s."""
    bench = Bench(port, rows)
    await bench.start_run("paced")

    async def paced(client: RawClient) -> float:
        status, reply, server = await client.timed_request(
            "POST", "/v1/runs/paced/events", bench.body("paced", 1)
        )
        assert status == 200, reply[:200]
        return server

    acks, acks_server = await bench.open_loop(200, args.paced_seconds, paced)
    commit_p99 = await _commit_p99(bench)
    print(
        f"ack latency at 200 rows/s offered ({len(acks)} rows): p50 {1e3 * quantile(acks, 0.5):.2f} ms, "
        f"p99 {1e3 * quantile(acks, 0.99):.2f} ms "
        f"(in the service: p50 {1e3 * quantile(acks_server, 0.5):.2f} ms, "
        f"p99 {1e3 * quantile(acks_server, 0.99):.2f} ms; journal commit p99 <= {commit_p99})"
        "  [target p99 < 50 ms]"
    )

    async def margin(client: RawClient) -> float:
        status, _, server = await client.timed_request("GET", "/drain_margin?run_id=paced")
        assert status == 200
        return server

    margins, margins_server = await bench.open_loop(1000, args.paced_seconds, margin)
    print(
        f"GET /drain_margin at 1,000 req/s offered ({len(margins)} requests, run with "
        f"{bench.next_task:,} samples): p50 {1e3 * quantile(margins, 0.5):.2f} ms, "
        f"p99 {1e3 * quantile(margins, 0.99):.2f} ms "
        f"(in the service: p50 {1e3 * quantile(margins_server, 0.5):.3f} ms, "
        f"p99 {1e3 * quantile(margins_server, 0.99):.3f} ms)  [target p99 < 2 ms]"
    )


async def _commit_p99(bench: Bench) -> str:
    """Upper bucket bound holding the 99th percentile of journal commit durations, from /metrics."""
    (client,) = await bench.clients(1)
    _, text = await client.request("GET", "/metrics")
    await client.close()
    buckets = []
    for line in text.decode().splitlines():
        if line.startswith("rollout_sidecar_journal_commit_duration_seconds_bucket"):
            bound = line.split('le="')[1].split('"')[0]
            buckets.append((bound, float(line.rsplit(" ", 1)[1])))
    total = buckets[-1][1]
    for bound, count in buckets:
        if count >= 0.99 * total:
            return f"{float(bound) * 1e3:g} ms" if bound != "+Inf" else "+Inf"
    return "?"


async def rss_async(args: argparse.Namespace, port: int, pid: int, rows: list[dict[str, Any]]) -> None:
    """RSS growth per rollout held, on a fresh server: warm up, then measure over ``--rss-rows``."""
    bench = Bench(port, rows)
    await bench.start_run("rss")

    async def rss_post(client: RawClient) -> None:
        status, reply = await client.request("POST", "/v1/runs/rss/events", bench.body("rss", args.batch))
        assert status == 200, reply[:200]

    await bench.closed_loop(8, 2000 // args.batch, rss_post)
    before = resident_bytes(pid)
    count = args.rss_rows // args.batch * args.batch
    await bench.closed_loop(8, args.rss_rows // args.batch, rss_post)
    per_row = (resident_bytes(pid) - before) / count
    print(
        f"resident memory: {per_row:,.0f} bytes per processed rollout over {count:,} rows after a 2,000-row "
        f"warm-up (= {per_row * 100_000 / 2**20:,.1f} MiB per 100k rollouts held)  [target < 1 KB]"
    )


def state_bytes_per_rollout(rows: list[dict[str, Any]], count: int) -> float:
    """Python heap growth (tracemalloc) of one in-process run state per ingested rollout."""
    import gc
    import tracemalloc

    from sidecar.ingest.engines import default_engines
    from sidecar.ingest.events import EventBatch, RunStarted
    from sidecar.state.run import RunState

    state = RunState(
        "mem", RunStarted(kind="run_started"), received_at=time.time(), engines=default_engines()
    )

    def feed(n: int, offset: int) -> None:
        for i in range(n):
            row = dict(rows[i % len(rows)])
            row["_ng_task_index"] = offset + i
            row["_ng_rollout_index"] = 0
            body = {"kind": "completed", "seconds": 1.0 + i % 600, "row": row}
            state.apply(EventBatch.validate_python([body])[0], time.time())

    feed(1000, 0)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    feed(count, 10**7)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / count


@contextlib.contextmanager
def _server(tmp: Path, workers: int, journal: Path | None = None) -> Iterator[tuple[int, int]]:
    """``rollout-sidecar serve`` on a free loopback port (fresh journal unless given), once
    ``/readyz`` answers 200 (the journal replayed, so no phase meets ``503 starting``); yields
    (port, pid)."""
    port = free_port()
    journal = journal if journal is not None else tmp / f"journal-{port}.sqlite3"
    server = SidecarProcess(
        journal,
        tmp / f"serve-{port}.log",
        port=port,
        extra_args=["--workers", str(workers)],
        log_level="warning",
    )
    server.start(timeout=300)
    try:
        assert server.pid is not None
        yield port, server.pid
    finally:
        server.stop(timeout=30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=6000, help="rows per throughput run")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--batch", type=int, default=16, help="events per request in the batched run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--paced-seconds", type=float, default=10.0)
    parser.add_argument("--rss-rows", type=int, default=100_000, help="rollouts held for the RSS figure")
    parser.add_argument("--phases", default="throughput,latency,memory", help="comma-separated subset to run")
    parser.add_argument(
        "--workers",
        default="0",
        help="serve --workers values compared side by side (the last one is used for the latency and "
        "memory phases); the option is a deprecated no-op since rows are digested from their bytes",
    )
    args = parser.parse_args()

    config = SyntheticConfig(
        num_tasks=400, repeats_per_task=1, model_calls_per_rollout=2, payload_bytes_per_call=1200
    )
    rows = list(generate_rows(config, 1))
    size = statistics.mean(len(orjson.dumps(r)) for r in rows)
    print(f"{len(rows)} distinct generated rows, mean {size / 1024:.1f} KiB; cpus {os.cpu_count()}")

    configs = [int(w) for w in args.workers.split(",")]
    results: dict[int, list[dict[str, tuple[float, ...]]]] = {w: [] for w in configs}
    with tempfile.TemporaryDirectory() as tmp:
        phases = set(args.phases.split(","))
        for repeat in range(args.repeats if "throughput" in phases else 0):  # interleaved: shared noise
            for workers in configs:
                with _server(Path(tmp), workers) as (port, pid):
                    results[workers].append(asyncio.run(throughput_async(args, port, pid, rows, repeat)))
        for workers in configs if "throughput" in phases else []:
            rounds = results[workers]
            baseline = statistics.median(r["healthz"][0] for r in rounds)
            print(
                f"[--workers {workers}] baseline GET /healthz: {baseline:,.0f} req/s "
                f"at concurrency {args.clients}"
            )
            for batch in (1, args.batch):
                phase = [r[f"batch{batch}"] for r in rounds]
                rates = [p[0] for p in phase]
                rate = statistics.median(rates)
                print(
                    f"[--workers {workers}] durable ingest, {batch} event(s)/request, "
                    f"{args.clients} clients: "
                    f"{rate:,.0f} rows/s (median of {len(rates)}: {', '.join(f'{r:,.0f}' for r in rates)}; "
                    f"{rate / baseline:.3f}x the healthz baseline), ack p50 "
                    f"{1e3 * statistics.median(p[1] for p in phase):.1f} ms p99 "
                    f"{1e3 * statistics.median(p[2] for p in phase):.1f} ms  [target >= 1,500 rows/s]"
                )
                service_cpu = statistics.median(p[3] for p in phase)
                worker_cpu = statistics.median(p[4] for p in phase)
                print(
                    f"[--workers {workers}]   CPU per row: service process {1e6 * service_cpu:,.0f} us, "
                    f"workers {1e6 * worker_cpu:,.0f} us -> the event loop alone could sustain "
                    f"{1 / service_cpu:,.0f} rows/s on a core of its own"
                )
        if "latency" in phases:
            with _server(Path(tmp), configs[-1]) as (port, _):
                print(f"[--workers {configs[-1]}] latency under offered load:")
                asyncio.run(latency_async(args, port, rows))
        if "memory" in phases:
            with _server(Path(tmp), configs[-1]) as (port, pid):
                asyncio.run(rss_async(args, port, pid, rows))
                journal = Path(tmp) / f"journal-{port}.sqlite3"
            events = args.rss_rows // args.batch * args.batch + 2000 // args.batch * args.batch + 1
            started = time.perf_counter()
            with _server(Path(tmp), configs[-1], journal):
                ready = time.perf_counter() - started
            print(
                f"restart: ready {ready:.1f} s after launch with {events:,} events to replay "
                f"(process start included; {events / ready:,.0f} events/s)"
            )
    if "memory" not in phases:
        return 0
    per_rollout = state_bytes_per_rollout(rows, 5000)
    print(
        f"run state: {per_rollout:,.0f} bytes of Python heap per rollout (tracemalloc, 5,000 rows, "
        f"tracker + health reducer + perf summary + accounting)  [target < 1 KB]"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
