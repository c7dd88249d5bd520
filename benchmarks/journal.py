"""Journal throughput and ack latency: group commit vs one transaction per event, same run.

Concurrent asyncio clients each append one ~8 KB event at a time and wait for its durable ack
(WAL, synchronous=FULL), for a fixed duration per measurement. The baseline is the same journal
with group commit disabled (``max_batch=1, max_delay_s=0``: one transaction and one fsync per
event). Each cell is the median of ``--runs`` runs on a fresh journal file.

    .venv/bin/python benchmarks/journal.py            # ~1 min
    .venv/bin/python benchmarks/journal.py --quick    # ~10 s smoke run
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from sidecar.journal import Journal, JournalEvent

TARGET_EVENTS_PER_S = 5000


@dataclass(frozen=True)
class Sample:
    events_per_s: float
    p50_ms: float
    p99_ms: float
    events_per_commit: float


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, round(q * (len(sorted_values) - 1)))
    return sorted_values[index]


async def _measure(
    path: Path, *, grouped: bool, clients: int, duration_s: float, payloads: list[bytes], tag: str
) -> Sample:
    journal = Journal(path) if grouped else Journal(path, max_batch=1, max_delay_s=0)
    await journal.open()
    latencies: list[float] = []
    counter = iter(range(10**12))
    deadline = time.perf_counter() + duration_s

    async def client(c: int) -> None:
        while time.perf_counter() < deadline:
            i = next(counter)
            event = JournalEvent("bench", "completed", f"{tag}|{c}|{i}", payloads[i % len(payloads)])
            started = time.perf_counter()
            [stored] = await journal.append([event])
            latencies.append(time.perf_counter() - started)
            assert stored is not None

    started = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    elapsed = time.perf_counter() - started
    stats = journal.stats
    await journal.close()
    latencies.sort()
    return Sample(
        events_per_s=len(latencies) / elapsed,
        p50_ms=_percentile(latencies, 0.50) * 1000,
        p99_ms=_percentile(latencies, 0.99) * 1000,
        events_per_commit=stats.events / max(1, stats.commits),
    )


def _remove(root: Path, name: str) -> None:
    for leftover in root.glob(name + "*"):
        leftover.unlink()


def _median_sample(samples: list[Sample]) -> Sample:
    """The run with the median throughput (its latencies belong to that same run)."""
    ordered = sorted(samples, key=lambda s: s.events_per_s)
    return ordered[len(ordered) // 2]


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", default="1,16,64,256", help="comma-separated concurrency levels")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per measurement")
    parser.add_argument("--runs", type=int, default=3, help="runs per cell (median reported)")
    parser.add_argument("--payload-bytes", type=int, default=8192)
    parser.add_argument("--dir", type=Path, default=None, help="parent of the journal files (default: temp)")
    parser.add_argument("--quick", action="store_true", help="1 run of 1 s per cell")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.duration = 1, 1.0
    levels = [int(x) for x in args.clients.split(",")]
    payloads = [os.urandom(args.payload_bytes) for _ in range(64)]
    root = Path(tempfile.mkdtemp(prefix="journal-bench-", dir=args.dir))
    print(
        f"journal benchmark: {args.payload_bytes} B payloads, durable acks (WAL, synchronous=FULL), "
        f"{args.duration:g} s per run, median of {args.runs} run(s), files under {root}"
    )
    header = ("clients", "mode", "events/s", "p50 ms", "p99 ms", "ev/commit", "ratio")
    print("{:>7}  {:<22}{:>10}{:>9}{:>9}{:>11}  {:>6}".format(*header))
    best = 0.0
    try:
        for clients in levels:
            cells: dict[bool, Sample] = {}
            for grouped in (False, True):
                samples = []
                for run in range(args.runs):
                    path = root / f"c{clients}-{'group' if grouped else 'naive'}-{run}.sqlite3"
                    samples.append(
                        await _measure(
                            path,
                            grouped=grouped,
                            clients=clients,
                            duration_s=args.duration,
                            payloads=payloads,
                            tag=f"{clients}-{grouped}-{run}",
                        )
                    )
                    _remove(root, path.name)
                cells[grouped] = _median_sample(samples)
            for grouped, label in ((False, "naive (1 txn/event)"), (True, "group commit")):
                s = cells[grouped]
                ratio = f"{s.events_per_s / cells[False].events_per_s:5.1f}x" if grouped else ""
                print(
                    f"{clients:>7}  {label:<22}{s.events_per_s:>10.0f}{s.p50_ms:>9.2f}{s.p99_ms:>9.2f}"
                    f"{s.events_per_commit:>11.1f}  {ratio:>6}"
                )
            best = max(best, cells[True].events_per_s)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    verdict = "MET" if best >= TARGET_EVENTS_PER_S else "NOT MET"
    print(f"target >= {TARGET_EVENTS_PER_S} durable events/s (best group-commit cell: {best:.0f}): {verdict}")


if __name__ == "__main__":
    asyncio.run(main())
