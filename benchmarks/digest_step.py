"""Benchmark: the per-record step's CPU per row on a corpus file, ours against another build.

One command::

    .venv/bin/python benchmarks/digest_step.py --baseline-ref main            # fault-heavy corpus
    .venv/bin/python benchmarks/digest_step.py --corpus healthy --rounds 5 --baseline-ref main

reads the first ``--rows`` lines of the cached ``benchmarks/health_check.py`` corpus (generate
it with that command first) and, alternating ``--rounds`` times between our build and the
``--baseline-ref`` build (``git archive``, native extensions built), times in a fresh process
of each, by the process's own CPU time and the minimum over ``--passes`` passes:

* ``digest_line_compact``: what a batch worker runs per line, each line passed as a
  ``memoryview`` of a read buffer (as the runner passes it);
* ``walk + pack (fast path)``: only the Python that follows the fast path's decode, for the
  records it vouches for (identity, evidence, the checks' walk, the compact digest), over
  records decoded beforehand; µs per corpus row.

It prints each build's median and our difference, per row. The machine is shared: only the
differences measured in the same run mean something.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
CORPUS_ROLLOUTS = 20000

_CHILD = r"""
import gc, itertools, json, sys, time
import health.digest as digest
from health.fast_path import EverydayRecord, read_stripped_line
from health.digest_forms import compact_from_walk

path, rows, passes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
with open(path, "rb") as handle:
    lines = [line.rstrip(b"\n") for line in itertools.islice(handle, rows)]
views = [memoryview(line) for line in lines]
everyday = [found for found in map(read_stripped_line, lines) if type(found) is EverydayRecord]
walk = digest._everyday_walked
nothing_ignored = frozenset()

def pack(walked, ordinal):
    if hasattr(walked, "compact"):
        return walked.compact(ordinal)
    return compact_from_walk(*walked, ordinal)  # builds whose walked record is a tuple

def line_step():
    step = digest.digest_line_compact
    for ordinal, view in enumerate(views):
        step(view, source_path="r", source_index=0, line_number=ordinal + 1, ordinal=ordinal)

def walk_step():
    for ordinal, found in enumerate(everyday):
        pack(walk(found, ordinal, nothing_ignored), ordinal)

gc.collect()
gc.freeze()
result = {}
for name, step in (("line", line_step), ("walk", walk_step)):
    best = float("inf")
    for _ in range(passes):
        started = time.process_time()
        step()
        best = min(best, time.process_time() - started)
    result[name] = best / len(lines) * 1e6
print(json.dumps(result))
"""


def _measure(build: Path, corpus: Path, rows: int, passes: int) -> dict[str, float]:
    """One fresh process importing ``build``'s packages first."""
    env = {**os.environ, "PYTHONPATH": str(build), "PYTHONHASHSEED": "0"}
    with tempfile.TemporaryDirectory() as scratch:  # no checkout on the path but ``build``
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(corpus), str(rows), str(passes)],
            cwd=scratch,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
    return dict(json.loads(done.stdout))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", choices=("healthy", "faulty"), default="faulty")
    parser.add_argument("--baseline-ref", default="main")
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    corpus = OUT / f"health_corpus_{args.corpus}_{CORPUS_ROLLOUTS}" / "rollouts.jsonl"
    if not corpus.is_file():
        hint = f"run benchmarks/health_check.py --corpus {args.corpus} first"
        print(f"no corpus at {corpus}: {hint}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from benchmarks.health_check import unpack_baseline

    builds = {"ours": ROOT, f"baseline {args.baseline_ref}": unpack_baseline(args.baseline_ref)}
    timings: dict[str, dict[str, list[float]]] = {name: {"line": [], "walk": []} for name in builds}
    for _ in range(args.rounds):
        for name, build in builds.items():
            for stage, value in _measure(build, corpus, args.rows, args.passes).items():
                timings[name][stage].append(value)
    print(f"{args.corpus} corpus, first {args.rows} lines; CPU µs per row, median of {args.rounds} rounds")
    medians = {name: {stage: statistics.median(v) for stage, v in by.items()} for name, by in timings.items()}
    labels = {"line": "digest_line_compact", "walk": "walk + pack (fast path)"}
    for stage, label in labels.items():
        cells = "  ".join(f"{name} {medians[name][stage]:7.1f}" for name in builds)
        ours, baseline = (medians[name][stage] for name in builds)
        print(f"  {label:26s} {cells}  ours - baseline {ours - baseline:+6.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
