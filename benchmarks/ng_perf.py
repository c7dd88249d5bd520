"""build_ng_perf throughput on realistic rows: ~8 model calls of ~8 KB payload each.

Rows come from ``sidecar.demo.synthetic`` (healthy rows, fixed seed), already parsed, as the service
holds them. Measured in the same run: the validation floor (``TrajectoryRecord`` validation of
the same ``ng_trajectory``, which ``build_ng_perf`` must do), ``build_ng_perf`` itself, and
parse + build from the row's JSON bytes. Each cell is the median of ``--runs`` passes over all
rows, in the process's CPU time (other load on a shared machine is not counted).

    .venv/bin/python benchmarks/ng_perf.py             # ~30 s
    .venv/bin/python benchmarks/ng_perf.py --rows 200  # quicker
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import orjson

from health.contract import validate_trajectory
from sidecar.demo.synthetic import SyntheticConfig, generate_rows
from sidecar.perf import build_ng_perf


def _rates(cells: dict[str, tuple[list[Any], Callable[[Any], object]]], runs: int) -> dict[str, float]:
    """Median rows per second of each cell's work over its rows; cells alternate within a run."""
    rates: dict[str, list[float]] = {name: [] for name in cells}
    for _ in range(runs + 1):  # the first pass warms up and is discarded
        for name, (rows, work) in cells.items():
            start = time.process_time()
            for row in rows:
                work(row)
            rates[name].append(len(rows) / (time.process_time() - start))
    return {name: statistics.median(values[1:]) for name, values in rates.items()}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=20261202)
    args = parser.parse_args()

    config = SyntheticConfig(num_tasks=max(1, args.rows // 4), repeats_per_task=4)
    rows = [row for row in generate_rows(config, args.seed) if "ng_trajectory" in row][: args.rows]
    encoded = [orjson.dumps(row) for row in rows]
    calls = statistics.mean(len(row["ng_trajectory"]["model_calls"]) for row in rows)
    kib = statistics.mean(len(line) for line in encoded) / 1024
    built = [build_ng_perf(row) for row in rows]
    assert all(perf is not None for perf in built), "synthetic rows should all carry a valid trajectory"

    rates = _rates(
        {
            "floor": (rows, lambda row: validate_trajectory(row["ng_trajectory"])),
            "build": (rows, lambda row: build_ng_perf(row)),
            "end_to_end": (encoded, lambda line: build_ng_perf(orjson.loads(line))),
        },
        args.runs,
    )
    floor, build, end_to_end = rates["floor"], rates["build"], rates["end_to_end"]

    print(
        f"{len(rows)} rows, {calls:.1f} model calls and {kib:.1f} KiB of JSON per row (median of {args.runs})"
    )
    print(f"  validation only (floor)     {floor:>9,.0f} rows/s")
    print(f"  build_ng_perf               {build:>9,.0f} rows/s  ({build / floor:.2f}x the floor)")
    print(f"  orjson.loads + build        {end_to_end:>9,.0f} rows/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
