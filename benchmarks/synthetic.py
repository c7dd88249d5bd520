"""Benchmark: how fast ``sidecar.demo.synthetic.write_run_dir`` streams full-size rollout rows.

One command::

    .venv/bin/python benchmarks/synthetic.py                 # 2,000 rollouts x ~8 calls x 8 KB, 3 runs
    .venv/bin/python benchmarks/synthetic.py --rollouts 20000 --repeats 1

Each run writes a fresh run directory under ``benchmarks/out/synthetic/`` and reports lines/s
by wall clock and by the process's own CPU time (the machine is shared, so CPU time is the
steadier figure), plus the peak RSS. The baseline, measured in the same process right after,
is the I/O floor: writing as many lines of the same total size, with the same buffering.
Target (issue 2): > 2,000 rows/s, with flat memory however many rows are written.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import statistics
import time
from pathlib import Path

from sidecar.demo.synthetic import FaultRates, SyntheticConfig, write_run_dir

OUT = Path(__file__).resolve().parent / "out" / "synthetic"
SEED = 11


def _write_floor(lines: int, size: int, target: Path) -> float:
    """CPU seconds to write ``lines`` lines of the same total ``size`` (the I/O floor)."""
    line = b"x" * (size // lines - 1) + b"\n"
    started = time.process_time()
    with open(target, "wb", buffering=1 << 20) as out:
        for _ in range(lines):
            out.write(line)
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    config = SyntheticConfig(
        num_tasks=args.rollouts // 4, repeats_per_task=4, faults=FaultRates.mixed(0.005), failure_rate=0.02
    )
    cpu_rates: list[float] = []
    wall_rates: list[float] = []
    for _ in range(args.repeats):
        shutil.rmtree(OUT, ignore_errors=True)
        wall, cpu = time.perf_counter(), time.process_time()
        stats = write_run_dir(OUT, config, SEED, materialized_inputs=False)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        lines = stats.rows + stats.unreadable_lines + stats.failure_rows
        size = stats.bytes_written
        cpu_rates.append(lines / cpu)
        wall_rates.append(lines / wall)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    floor_rates = [lines / _write_floor(lines, size, OUT / "floor.jsonl") for _ in range(args.repeats)]
    cpu_rate, floor = statistics.median(cpu_rates), statistics.median(floor_rates)
    print(f"{lines} lines, {size / 1e9:.2f} GB ({size / lines / 1000:.1f} KB/line), {args.repeats} runs")
    wall_rate = statistics.median(wall_rates)
    print(f"generate+write: {cpu_rate:,.0f} lines/s of CPU time, {wall_rate:,.0f} lines/s wall")
    print(f"baseline (write as many bytes): {floor:,.0f} lines/s of CPU time; ratio {cpu_rate / floor:.3f}")
    print(f"peak RSS {peak_mb:.0f} MB")
    shutil.rmtree(OUT, ignore_errors=True)


if __name__ == "__main__":
    main()
