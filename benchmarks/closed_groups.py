"""Closed-groups file: restore at restart and append, this build against a baseline build.

One command: ``.venv/bin/python benchmarks/closed_groups.py`` (``--help`` for sizes). The
baseline is ``sidecar/journal/_closed_groups.py`` at ``--baseline-ref`` (default: the commit
before issue 24 gave the file a copy and per-segment CRCs), loaded beside this build's module in
the same process. Both write the same groups (about 40 MB at the default 300,000 groups: the
1M-rollout state of ``benchmarks/state.py``); then, interleaved, each restores its file from its
snapshot mark (the whole of the restart's work on this file) and appends ``--appends`` groups.
Medians of ``--repeats`` rounds and the ratios this/baseline are printed.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sidecar.journal import _closed_groups as current  # noqa: E402

_MODULE = "sidecar/journal/_closed_groups.py"


def _baseline(ref: str, into: Path) -> ModuleType:
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{ref}:{_MODULE}"], check=True, capture_output=True
    ).stdout
    path = into / "baseline_closed_groups.py"
    path.write_bytes(source)
    spec = importlib.util.spec_from_file_location("baseline_closed_groups", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _open(module: ModuleType, directory: Path) -> current.ClosedGroupFile:
    groups: current.ClosedGroupFile = module.ClosedGroupFile.in_directory(directory)
    return groups


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=300_000)
    parser.add_argument("--appends", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--baseline-ref", default="39e56be")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="closed-groups-bench-"))
    try:
        builds = {"baseline": _baseline(args.baseline_ref, tmp), "this build": current}
        rng = random.Random(1)
        blobs = [rng.randbytes(rng.randint(60, 200)) for _ in range(args.groups)]
        marks = {}
        for label, module in builds.items():
            groups = _open(module, tmp / label)
            groups.restore(None)
            for blob in blobs:
                groups.put(blob)
            groups.sync()
            marks[label] = groups.mark()
            groups.close()
        restore: dict[str, list[float]] = {label: [] for label in builds}
        append: dict[str, list[float]] = {label: [] for label in builds}
        for round_ in range(args.repeats):
            for label, module in builds.items():
                groups = _open(module, tmp / label)
                began = time.perf_counter()
                groups.restore(marks[label])
                restore[label].append(time.perf_counter() - began)
                groups.close()
                fresh = _open(module, tmp / f"{label}-append-{round_}")
                fresh.restore(None)
                began = time.perf_counter()
                for blob in blobs[: args.appends]:
                    fresh.put(blob)
                append[label].append((time.perf_counter() - began) / args.appends)
                fresh.close()
        print(f"{args.groups:,} groups, {marks['this build'].length:,} bytes; medians of {args.repeats}")
        base_r, this_r = (statistics.median(restore[label]) for label in builds)
        base_a, this_a = (statistics.median(append[label]) for label in builds)
        print(
            f"  restore at restart: baseline {base_r * 1e3:.1f} ms, this build {this_r * 1e3:.1f} ms, "
            f"ratio {this_r / base_r:.2f}"
        )
        print(
            f"  append a group:     baseline {base_a * 1e6:.2f} us, this build {this_a * 1e6:.2f} us, "
            f"ratio {this_a / base_a:.2f} (two files written)"
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
