"""Where the live service's CPU per row goes, by thread: the event loop's vs the journal's threads.

    .venv/bin/python benchmarks/ack_threads.py                      # this build vs main, 6 rounds each
    .venv/bin/python benchmarks/ack_threads.py --baseline-ref HEAD~3 --rounds 4

``rollout-sidecar serve`` of this build and of ``--baseline-ref`` (unpacked with ``git archive``),
interleaved (the order flips every round), each loaded with ``live_profile.py``'s 12.5 KiB rows,
8 clients x 16 rows a request, durable acks. Per round: the process's CPU per row, split into
the event loop's thread (the one whose id is the process id) and every other thread (the
journal's writer, which commits and fsyncs, plus its checkpointer), read from
``/proc/<pid>/task/<tid>/schedstat`` (nanoseconds on CPU). The whole-process figure swings by
10-20% on this shared machine; the writer's share is small and steadier, so a change of the
journal shows here when the process total cannot resolve it. Medians over the rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.baseline import unpack_baseline  # noqa: E402
from benchmarks.live_profile import BARE_ROWS, generated_rows, ingest_round  # noqa: E402
from benchmarks.state import serve  # noqa: E402


def thread_cpu(pid: int) -> tuple[float, float]:
    """(CPU seconds of the event loop's thread, of all other threads) of process ``pid``."""
    loop = others = 0.0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            seconds = int((task / "schedstat").read_text().split()[0]) / 1e9
        except (OSError, ValueError, IndexError):  # a thread that just ended
            continue
        if task.name == str(pid):
            loop += seconds
        else:
            others += seconds
    return loop, others


async def _measured(
    url: str, pid: int, rows: list[dict[str, object]], count: int
) -> tuple[float, float, float]:
    """(rows/s, event-loop thread µs per row, other threads µs per row) of one round."""
    await ingest_round(url, pid, rows, 800, 8, 16)  # warm-up: imports, caches, the run started
    loop_before, others_before = thread_cpu(pid)
    rate, _ = await ingest_round(url, pid, rows, count, 8, 16)
    loop_after, others_after = thread_cpu(pid)
    done = count // 16 * 16
    return rate, (loop_after - loop_before) / done * 1e6, (others_after - others_before) / done * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-ref", default="main")
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--rows", type=int, default=6000, help="rows per round")
    parser.add_argument("--bare", action="store_true", help="rows without a trajectory instead")
    args = parser.parse_args()
    rows = BARE_ROWS if args.bare else generated_rows(2100)
    results: dict[str, list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        builds: dict[str, Path | None] = {
            f"baseline {args.baseline_ref}": unpack_baseline(args.baseline_ref, Path(tmp) / "baseline"),
            "this build": None,
        }
        for index in range(args.rounds):
            order = list(builds.items()) if index % 2 == 0 else list(reversed(builds.items()))
            for name, code in order:
                with serve(Path(tmp) / f"r{index}-{name.split()[0]}" / "journal.sqlite3", code=code) as (
                    url,
                    pid,
                ):
                    outcome = asyncio.run(_measured(url, pid, rows, args.rows))
                results.setdefault(name, []).append(outcome)
                rate, loop, others = outcome
                print(f"round {index} {name:>22}: {loop + others:6.1f} µs/row = event loop {loop:6.1f} "
                      f"+ journal threads {others:5.1f}; {rate:7,.0f} rows/s", flush=True)  # fmt: skip
    kind = "bare" if args.bare else "12.5 KiB"
    print(f"\n## {kind} rows, 8 clients x 16, durable acks, median of {args.rounds}")
    for name, rounds in results.items():
        loop = statistics.median(r[1] for r in rounds)
        others = statistics.median(r[2] for r in rounds)
        total = statistics.median(r[1] + r[2] for r in rounds)
        rate = statistics.median(r[0] for r in rounds)
        print(f"  {name:>22}: {total:6.1f} µs/row; event loop {loop:6.1f}, journal threads {others:5.1f}; "
              f"{rate:7,.0f} rows/s")  # fmt: skip


if __name__ == "__main__":
    main()
