"""What ``dispatcher_client`` costs a dispatcher: throughput with and without it, and per-call time.

A simulated dispatcher against a fake agent process, three modes alternating (in-process tracker,
``RemoteLatencyTracker``, plus ``SidecarClient``); ``--phase import``: the import alone. Method and
targets: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.baseline import PACKAGES, quantile  # noqa: E402
from dispatcher_client import ClientConfig, RemoteLatencyTracker, SidecarClient  # noqa: E402
from sidecar.perf import DispatchLatencyTracker, build_ng_perf  # noqa: E402
from tests.reliability_harness.sidecar_process import SidecarProcess, free_port  # noqa: E402

MODES = ("baseline", "tracker", "sidecar")
_AGENT = r"""
import asyncio, random, sys
import orjson
from tests.sidecar.synthetic_support import SyntheticConfig, rollout_event

port, latency = int(sys.argv[1]), float(sys.argv[2])
config = SyntheticConfig(num_tasks=64, repeats_per_task=1, model_calls_per_rollout=2,
                         payload_bytes_per_call=1024)
rows = [orjson.dumps(rollout_event(config, 1, t, 0).row) for t in range(64)]
rows = [r for r in rows if r != b"null"] or [b"{}"]

async def handle(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            await asyncio.sleep(latency * random.uniform(0.5, 1.5))
            body = random.choice(rows)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: "
                         + str(len(body)).encode() + b"\r\n\r\n" + body)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        writer.close()

async def main():
    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    print("ready", flush=True)
    async with server:
        await server.serve_forever()

asyncio.run(main())
"""


class _Connection:
    """One keep-alive HTTP/1.1 connection to the fake agent (cheap, so the dispatcher is not CPU-bound)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    async def post(self, path: str, body: bytes) -> bytes:
        head = f"POST {path} HTTP/1.1\r\nHost: agent\r\nContent-Length: {len(body)}\r\n\r\n"
        self.writer.write(head.encode() + body)
        header = await self.reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in header.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        return await self.reader.readexactly(length)


async def dispatch(
    agent_port: int,
    tasks: int,
    concurrency: int,
    tracker: Any,
    sidecar: SidecarClient | None,
    timings: list[int],
) -> float:
    """Run ``tasks`` rollouts, ``concurrency`` at a time; returns completed tasks per second."""
    pool: asyncio.Queue[_Connection] = asyncio.Queue()
    for _ in range(concurrency):
        pool.put_nowait(_Connection(*await asyncio.open_connection("127.0.0.1", agent_port)))
    slots = asyncio.Semaphore(concurrency)
    deadline = time.monotonic() + 86_400.0

    async def one(index: int) -> None:
        row = {"_ng_task_index": index, "_ng_rollout_index": 0, "responses_create_params": {"input": "q"}}
        async with slots:
            t0 = time.perf_counter_ns()
            margin = tracker.drain_margin(None)
            spent = time.perf_counter_ns() - t0
            if margin is not None and deadline - time.monotonic() < margin:
                tracker.record_drained()
                return
            connection = await pool.get()
            start = time.monotonic()
            result = orjson.loads(await connection.post("/run", orjson.dumps(row)))
            seconds = time.monotonic() - start
            pool.put_nowait(connection)
            t0 = time.perf_counter_ns()
            tracker.record(seconds)
            timings.append(spent + time.perf_counter_ns() - t0)  # this task's drain_margin + record
        result.update(row)
        if sidecar is not None:
            result["ng_perf"] = await sidecar.completed(row, result, seconds=seconds)
        else:
            result["ng_perf"] = build_ng_perf(result, seconds * 1000.0)  # what NeMo Gym does in-process

    started = time.monotonic()
    await asyncio.gather(*(one(index) for index in range(tasks)))
    rate = tasks / (time.monotonic() - started)
    while not pool.empty():
        pool.get_nowait().writer.close()
    return rate


async def run_mode(
    mode: str, args: argparse.Namespace, agent: int, sidecar_url: str, run: int
) -> dict[str, Any]:
    timings: list[int] = []
    if mode == "baseline":
        rate = await dispatch(agent, args.tasks, args.concurrency, DispatchLatencyTracker(), None, timings)
        return {"rate": rate, "timings": timings}
    run_id = f"bench-{os.getpid()}-{mode}-{run}"
    tracker = RemoteLatencyTracker(sidecar_url, run_id=run_id)
    if mode == "tracker":
        rate = await dispatch(agent, args.tasks, args.concurrency, tracker, None, timings)
        tracker.flush(60)
        tracker.close()
        return {"rate": rate, "timings": timings, "lost": tracker.stats.dropped + tracker.stats.rejected}
    async with SidecarClient(sidecar_url, run_id=run_id) as sidecar:
        rate = await dispatch(agent, args.tasks, args.concurrency, tracker, sidecar, timings)
        await sidecar.flush(60)
        stats = sidecar.stats
    tracker.flush(60)
    tracker.close()
    lost = stats.dropped + tracker.stats.dropped + stats.rejected + tracker.stats.rejected
    return {"rate": rate, "timings": timings, "lost": lost, "local_ng_perf": stats.local_ng_perf}


def tight_loop(tracker: Any, calls: int) -> list[int]:
    """record + drain_margin per call, back to back (a remote tracker's thread delivering)."""
    out = []
    rng = random.Random(5)
    values = [rng.lognormvariate(3, 1) for _ in range(1024)]
    perf = time.perf_counter_ns
    for index in range(calls):
        t0 = perf()
        tracker.record(values[index & 1023])
        tracker.drain_margin(None)
        out.append(perf() - t0)
    return out


def tight_loops(sidecar_url: str, calls: int) -> tuple[list[int], list[int]]:
    """The in-process tracker, then ``RemoteLatencyTracker``, over the same values."""
    local = tight_loop(DispatchLatencyTracker(), calls)
    config = ClientConfig(max_buffered_events=calls + 16)  # far beyond any real call rate: keep all
    tracker = RemoteLatencyTracker(sidecar_url, run_id=f"tight-{os.getpid()}", config=config)
    remote = tight_loop(tracker, calls)
    tracker.flush(60)
    tracker.close()
    return local, remote


def _us(ns: list[int], q: float) -> float:
    return quantile(ns, q) / 1000.0


def import_cost(runs: int) -> None:
    """The client's import in a fresh interpreter against its own dependencies' (the baseline)."""
    base_stmt, client_stmt = "import httpx, pydantic, orjson", "import dispatcher_client"

    def python(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, *args], check=True, capture_output=True, text=True)

    def wall(statement: str) -> float:
        started = time.perf_counter()
        python("-c", statement)
        return time.perf_counter() - started

    def own_ms() -> float:
        total = 0
        for line in python("-X", "importtime", "-c", client_stmt).stderr.splitlines():
            parts = [part.strip() for part in line.removeprefix("import time:").split("|")]
            if len(parts) == 3 and parts[0].isdigit() and parts[2].split(".")[0] in PACKAGES:
                total += int(parts[0])
        return total / 1000

    wall(client_stmt)  # warm the file cache and the bytecode
    pairs = [(wall(base_stmt), wall(client_stmt)) for _ in range(runs)]
    base = statistics.median(b for b, _ in pairs)
    client = statistics.median(c for _, c in pairs)
    print(f"interpreter + {base_stmt!r}: {base * 1000:.0f} ms (median of {runs})")
    print(f"interpreter + {client_stmt!r}: {client * 1000:.0f} ms")
    print(f"ratio: {client / base:.2f}x; the client's own share: {(client - base) * 1000:.0f} ms")
    own = statistics.median(own_ms() for _ in range(runs))
    print(f"self time of this project's modules (-X importtime, median): {own:.0f} ms")
    listing = f"import sys\n{client_stmt}\nprint(' '.join(sorted(sys.modules)))"
    loaded = [name for name in python("-c", listing).stdout.split() if name.split(".")[0] in PACKAGES]
    shown = ", ".join(name for name in loaded if not name.startswith("health.contract._"))
    print(f"project modules loaded ({len(loaded)}): {shown}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--phase", choices=("all", "dispatch", "import"), default="all")
    parser.add_argument("--import-runs", type=int, default=11, help="fresh interpreters per import")
    parser.add_argument("--tasks", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--latency", type=float, default=1.0, help="mean agent latency, seconds")
    parser.add_argument("--runs", type=int, default=3, help="runs per mode (alternating)")
    parser.add_argument("--tight-calls", type=int, default=200_000)
    args = parser.parse_args()
    if args.phase != "dispatch":
        import_cost(args.import_runs)
        if args.phase == "import":
            return 0

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    agent_port, sidecar_port = free_port(), free_port()
    with tempfile.TemporaryDirectory() as tmp:
        agent = subprocess.Popen(
            [sys.executable, "-c", _AGENT, str(agent_port), str(args.latency)],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
        )
        journal = Path(tmp) / "journal.sqlite3"
        sidecar = SidecarProcess(journal, port=sidecar_port, log_level="warning")
        try:
            assert agent.stdout is not None and agent.stdout.readline().strip() == b"ready"
            sidecar_url = sidecar.start(timeout=20)
            print(
                f"{args.tasks} tasks, concurrency {args.concurrency}, agent latency ~{args.latency}s, "
                f"{args.runs} runs per mode (alternating)"
            )
            results: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
            for run in range(args.runs):
                for mode in MODES:
                    outcome = asyncio.run(run_mode(mode, args, agent_port, sidecar_url, run))
                    results[mode].append(outcome)
                    extra = f", lost {outcome['lost']}" if mode != "baseline" else ""
                    print(f"  run {run + 1} {mode:8s}: {outcome['rate']:8.1f} tasks/s{extra}")
            base = statistics.median(r["rate"] for r in results["baseline"])
            only = statistics.median(r["rate"] for r in results["tracker"])
            side = statistics.median(r["rate"] for r in results["sidecar"])
            print(
                f"median tasks/s: baseline {base:.1f}; RemoteLatencyTracker only {only:.1f} "
                f"(ratio {only / base:.4f}); RemoteLatencyTracker + SidecarClient {side:.1f} "
                f"(ratio {side / base:.4f})"
            )
            print("  target: ratio >= 0.98")
            for mode in MODES:
                timings = [t for r in results[mode] for t in r["timings"]]
                print(
                    f"drain_margin + record per task on the dispatcher's loop ({mode}): "
                    f"median {_us(timings, 0.5):.2f} us, p99 {_us(timings, 0.99):.2f} us "
                    f"({len(timings)} tasks)"
                )
            local, tight = tight_loops(sidecar_url, args.tight_calls)
            print(
                f"record + drain_margin, tight loop, in-process tracker: "
                f"median {_us(local, 0.5):.2f} us, p99 {_us(local, 0.99):.2f} us ({len(local)} calls)"
            )
            print(
                f"record + drain_margin, tight loop, RemoteLatencyTracker (forwarding thread busy): "
                f"median {_us(tight, 0.5):.2f} us, p99 {_us(tight, 0.99):.2f} us ({len(tight)} calls); "
                "target median < 10 us"
            )
        finally:
            agent.terminate()
            agent.wait(15)
            sidecar.stop(timeout=15)
    return 0


if __name__ == "__main__":
    sys.exit(main())
