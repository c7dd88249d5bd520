"""The service against another build, side by side: ingest, journal size, restart, memory, reads.

``--baseline-ref``: a commit id; ``--quick``: 10k rollouts, one round. What is measured, how, and
the targets: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from benchmarks.baseline import (  # noqa: E402
    Poller,
    connect,
    preload,
    quantile,
    request,
    service,
    start_run,
    unpack_baseline,
    verdict,
)
from tests.reliability_harness.proc_stats import cpu_seconds, resident_bytes  # noqa: E402

RUN = "state"
Figures = dict[str, float]


def journal_bytes(journal: Path) -> int:
    """The journal's SQLite file and whatever beside it shares its name (WAL, shared memory)."""
    return sum(path.stat().st_size for path in journal.parent.glob(journal.name + "*") if path.is_file())


def one_build(pool: ProcessPoolExecutor, workdir: Path, code: Path, rollouts: int) -> Figures:
    """Ingest ``rollouts`` into a fresh journal, stop, restart on it: this build's figures."""
    figures: Figures = {}
    journal = workdir / "state.sqlite3"
    for leftover in workdir.glob("state*"):
        leftover.unlink()
    with service(workdir, "state", cwd=code) as sidecar:
        assert sidecar.pid is not None
        start_run(sidecar.url, RUN)
        cpu_before = sum(cpu_seconds(sidecar.pid))
        with Poller(sidecar.url, RUN) as poller:
            began = time.perf_counter()
            share = rollouts // 4
            jobs = [pool.submit(preload, sidecar.url, RUN, i * share, share, 64) for i in range(4)]
            count = sum(job.result() for job in jobs)
            elapsed = time.perf_counter() - began
        figures["ingest rows/s"] = count / elapsed
        figures["service CPU per row (µs)"] = (sum(cpu_seconds(sidecar.pid)) - cpu_before) / count * 1e6
        figures["/drain_margin p99 while ingesting (ms)"] = (
            quantile(poller.within((began, began + elapsed)), 0.99) * 1e3
        )
    figures["journal bytes per rollout"] = journal_bytes(journal) / count
    with service(workdir, "empty", cwd=code) as empty:
        assert empty.pid is not None
        time.sleep(1.0)
        empty_rss = resident_bytes(empty.pid)
    began = time.perf_counter()
    with service(workdir, "state", cwd=code) as sidecar:
        assert sidecar.pid is not None
        figures["restart to ready (s)"] = time.perf_counter() - began
        time.sleep(1.0)
        figures["resident bytes per rollout"] = (resident_bytes(sidecar.pid) - empty_rss) / count
        conn, reads = connect(sidecar.url), []
        for _ in range(5):
            start = time.perf_counter()
            status, answer = request(conn, "GET", f"/report?run_id={RUN}")
            assert status == 200, answer[:300]
            reads.append(time.perf_counter() - start)
        figures["/report (ms)"] = statistics.median(reads) * 1e3
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-ref", default="HEAD", help="commit to compare with (default HEAD)")
    parser.add_argument("--rollouts", type=int, default=100_000, help="rollouts a build takes (default 100k)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    parser.add_argument("--quick", action="store_true", help="10k rollouts, one round")
    args = parser.parse_args(argv)
    rollouts, rounds = (10_000, 1) if args.quick else (args.rollouts, args.rounds)
    print(f"load average {os.getloadavg()[0]:.1f}; {rollouts:,} rollouts, {rounds} round(s)")
    results: dict[str, list[Figures]] = {"this": [], "baseline": []}
    with (
        tempfile.TemporaryDirectory(prefix="service-") as tmp,
        ProcessPoolExecutor(4, mp_context=multiprocessing.get_context("spawn")) as pool,
    ):
        list(pool.map(time.sleep, [0.5] * 4))  # every worker started before any load is timed
        builds = {"this": ROOT, "baseline": unpack_baseline(args.baseline_ref, Path(tmp) / "baseline")}
        for round_number in range(rounds):
            order = ["this", "baseline"][:: 1 if round_number % 2 == 0 else -1]
            for name in order:
                workdir = Path(tmp) / f"{name}-{round_number}"
                workdir.mkdir()
                results[name].append(one_build(pool, workdir, builds[name], rollouts))
                print(
                    f"  round {round_number + 1} {name}: "
                    + ", ".join(f"{k} {v:.4g}" for k, v in results[name][-1].items())
                )
    medians = {
        name: {key: statistics.median(r[key] for r in runs) for key in runs[0]}
        for name, runs in results.items()
    }
    print(f"\n{'median of ' + str(rounds):42} {'this':>10} {'baseline':>10} {'ratio':>7}")
    for key, value in medians["this"].items():
        other = medians["baseline"][key]
        print(f"{key:42} {value:10.4g} {other:10.4g} {value / other if other else float('nan'):7.2f}")
    this, base = medians["this"], medians["baseline"]
    held = verdict("journal bytes per rollout", this["journal bytes per rollout"], 512, " B")
    held &= verdict("baseline / this ingest rows/s", base["ingest rows/s"] / this["ingest rows/s"], 1 / 0.9)
    held &= verdict(
        "this / baseline CPU per row",
        this["service CPU per row (µs)"] / base["service CPU per row (µs)"],
        1.1,
    )
    return 0 if held else 1


if __name__ == "__main__":
    sys.exit(main())
