"""Benchmark: the health pipeline's per-record step (``health.digest.digest_line``), µs per row.

One command::

    .venv/bin/python benchmarks/record_step.py               # 1,000 rollouts, 5 runs
    .venv/bin/python benchmarks/record_step.py --rollouts 4000 --repeats 3

Rows come from ``sidecar.synthetic`` (multi-turn agents, subagents, ~8 KB per model call,
a few faults), generated in memory once. Each run times, by the process's own CPU time (the
machine is shared), over every row:

* ``parse floor``: ``orjson.loads`` alone, the cost no implementation can avoid;
* ``validate+dump baseline``: parse, then the contract's ``canonical_trajectory`` (validate and
  ``model_dump(mode="json")``), the work the reference does before any check runs;
* ``full path``: the per-record step as it runs for any line: orjson parse, identity, pydantic
  validation, depth guard, evidence, the checks, the digest;
* ``digest_line``: the step as the batch check runs it: the fast path (simdjson validation,
  strict msgspec decode with the payloads left raw, ``health.fast_path``) for plainly valid
  records, the full path for the rest.

It prints the medians and the ratios of ``digest_line`` to the others, in the same run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import orjson

from health.contract import canonical_trajectory
from health.digest import _digest_parsed, digest_line
from health.parse import parse_line
from sidecar.synthetic import FaultRates, SyntheticConfig, generate_rows

SEED = 20261202


def _cpu_us_per_row(rows: list[bytes], step: Callable[[int, bytes], object]) -> float:
    started = time.process_time()
    for position, line in enumerate(rows):
        step(position, line)
    return (time.process_time() - started) / len(rows) * 1e6


def _parse(position: int, line: bytes) -> object:
    return orjson.loads(line)


def _validate_and_dump(position: int, line: bytes) -> object:
    record = orjson.loads(line)
    return canonical_trajectory(record.get("ng_trajectory"))


def _full_path(position: int, line: bytes) -> object:
    record, error = parse_line(line)
    location = ("rollouts.jsonl", 0, position + 1, position)
    return _digest_parsed(record, error, location, frozenset(), len(line), None)


def _digest(position: int, line: bytes) -> object:
    return digest_line(
        line, source_path="rollouts.jsonl", source_index=0, line_number=position + 1, ordinal=position
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    config = SyntheticConfig(
        num_tasks=max(1, args.rollouts // 4), repeats_per_task=4, faults=FaultRates.mixed(0.02)
    )
    rows = [orjson.dumps(row) for row in generate_rows(config, SEED)]
    size = sum(map(len, rows)) / len(rows)
    steps = {
        "parse floor": _parse,
        "validate+dump baseline": _validate_and_dump,
        "full path": _full_path,
        "digest_line": _digest,
    }
    timings: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeats):
        for name, step in steps.items():  # interleaved, so load changes hit all of them alike
            timings[name].append(_cpu_us_per_row(rows, step))
    medians = {name: statistics.median(values) for name, values in timings.items()}
    print(f"{len(rows)} rows, {size / 1000:.1f} KB/row, {args.repeats} runs (CPU time, median)")
    for name, value in medians.items():
        print(f"  {name:24s} {value:8.1f} µs/row  ({1e6 / value:,.0f} rows/s per core)")
    digest = medians["digest_line"]
    print(f"digest_line / parse floor: {digest / medians['parse floor']:.2f}x")
    print(f"digest_line / validate+dump baseline: {digest / medians['validate+dump baseline']:.2f}x")
    print(f"digest_line / full path: {digest / medians['full path']:.2f}x")


if __name__ == "__main__":
    main()
