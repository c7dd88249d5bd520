"""Benchmark: ``rollout-sidecar health-check`` as a whole process, against the reference.

One command::

    .venv/bin/python benchmarks/health_check.py            # 20,000 rollouts, 3 runs each

generates (once; cached under ``benchmarks/out/health_corpus_<N>/``) a run directory of
realistic rollouts with ~8 KB of payload per model call, then alternates runs of our CLI
and of NeMo Gym 0.7.0's (``refcli.py health-check``, only when the oracle is installed in
``/tmp/oracle``) on it. Each run is timed as a whole process; its peak memory is the
largest sum of resident set sizes over the whole process tree (the CLI and its pool
workers), sampled from ``/proc``. It prints the median wall time, rows/s, the peak RSS,
the ratio to the reference, and whether both tools wrote byte-identical reports.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
OUT = HERE / "out"
REPORTS = OUT / "health_reports"
# The reference, when a shared checkout is beside the repository (optional: skipped without it).
SHARED = Path(os.environ.get("ROLLOUT_SIDECAR_SHARED", HERE.parent.parent / "shared"))
REFCLI = SHARED / "tools" / "reference" / "refcli.py"
ORACLE = Path("/tmp/oracle")
REPORT_FILES = ("quality_summary.json", "rollout_verdicts.jsonl")
SEED = 20261202


@dataclass(frozen=True)
class Measurement:
    seconds: float
    cpu_seconds: float
    """User + system time of the whole process tree (every waited-for descendant)."""
    peak_rss: int
    returncode: int


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(child) for child in handle.read().split())
    except OSError:
        pass
    return found


def _rss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _tree_rss(root: int) -> int:
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        total += _rss(pid)
        stack.extend(_children(pid))
    return total


def measure(command: list[str], cwd: Path, interval: float = 0.02) -> Measurement:
    """Run ``command``; return wall time, CPU time and the peak RSS summed over its process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_rss(process.pid))
            stop.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, stderr = process.communicate()
    seconds = time.perf_counter() - start
    stop.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if process.returncode:
        sys.stderr.write(stderr.decode(errors="replace"))
    return Measurement(seconds, cpu, peak, process.returncode)


def _synthetic_rows(rollouts: int) -> object:
    from sidecar.synthetic import FaultRates, SyntheticConfig, generate_rows

    config = SyntheticConfig(num_tasks=rollouts // 4, repeats_per_task=4, faults=FaultRates.mixed(0.005))
    return generate_rows(config, SEED)


def ensure_corpus(rollouts: int, regenerate: bool) -> Path:
    """The cached corpus run directory for ``rollouts``, generated if missing or stale."""
    corpus = OUT / f"health_corpus_{rollouts}"
    meta_path = corpus / "corpus.json"
    rollouts_path = corpus / "rollouts.jsonl"
    wanted = {"rollouts": rollouts, "seed": SEED, "generator": "sidecar.synthetic"}
    cached = not regenerate and rollouts_path.is_file() and meta_path.is_file()
    if cached and json.loads(meta_path.read_text()).get("request") == wanted:
        return corpus
    corpus.mkdir(parents=True, exist_ok=True)
    print(f"generating {rollouts} rollouts into {rollouts_path} ...", flush=True)
    started = time.perf_counter()
    count = 0
    tmp = rollouts_path.with_suffix(".tmp")
    with open(tmp, "wb") as handle:
        for row in _synthetic_rows(rollouts):  # type: ignore[attr-defined]
            handle.write(orjson.dumps(row) + b"\n")
            count += 1
    tmp.replace(rollouts_path)
    meta = {"request": wanted, "rows": count, "bytes": rollouts_path.stat().st_size}
    meta_path.write_text(json.dumps(meta, indent=2))
    elapsed = time.perf_counter() - started
    print(f"  {count} rows, {meta['bytes'] / 1e9:.2f} GB in {elapsed:.0f} s", flush=True)
    return corpus


def _clear_reports(run_dir: Path) -> None:
    for name in REPORT_FILES:
        (run_dir / name).unlink(missing_ok=True)


def _keep_reports(run_dir: Path, label: str) -> None:
    target = REPORTS / label
    target.mkdir(parents=True, exist_ok=True)
    for name in REPORT_FILES:
        shutil.copyfile(run_dir / name, target / name)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="passed to both tools (default: theirs)")
    parser.add_argument("--no-reference", action="store_true", help="time our CLI alone")
    parser.add_argument("--regenerate", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"cpus: {os.cpu_count()}, load average (1 min): {load:.2f}", flush=True)

    run_dir = ensure_corpus(args.rollouts, args.regenerate)
    ours_cli = Path(sys.executable).with_name("rollout-sidecar")
    tools: dict[str, list[str]] = {"ours": [str(ours_cli), "health-check", run_dir.name]}
    if not args.no_reference and ORACLE.is_dir() and REFCLI.is_file():
        tools["reference"] = ["python3", str(REFCLI), "health-check", run_dir.name]
    if args.workers is not None:
        for command in tools.values():
            command += ["--workers", str(args.workers)]

    results: dict[str, list[Measurement]] = {label: [] for label in tools}
    for run in range(args.runs):
        for label, command in tools.items():
            _clear_reports(run_dir)
            measured = measure(command, cwd=run_dir.parent)
            if measured.returncode:
                print(f"{label} failed with exit code {measured.returncode}")
                return 1
            results[label].append(measured)
            if run == 0:
                _keep_reports(run_dir, label)
            print(
                f"run {run + 1} {label:9s} {measured.seconds:7.2f} s wall  {measured.cpu_seconds:7.2f} s cpu"
                f"  {measured.peak_rss / 2**20:6.0f} MB",
                flush=True,
            )

    summary = orjson.loads((REPORTS / "ours" / "quality_summary.json").read_bytes())
    rows = summary["run"]["artifacts"]["records"]
    size = (run_dir / "rollouts.jsonl").stat().st_size
    print(f"\ncorpus: {rows} rollouts, {size / 1e9:.2f} GB; median of {args.runs} runs")
    rates: dict[str, float] = {}
    cpu: dict[str, float] = {}
    print(f"  {'':9s} {'wall s':>8s} {'rows/s':>8s} {'cpu s':>8s} {'peak RSS (tree)':>16s}")
    for label, measurements in results.items():
        seconds = statistics.median(m.seconds for m in measurements)
        cpu[label] = statistics.median(m.cpu_seconds for m in measurements)
        rates[label] = rows / seconds
        peak = max(m.peak_rss for m in measurements)
        print(f"  {label:9s} {seconds:8.2f} {rates[label]:8.0f} {cpu[label]:8.2f} {peak / 2**20:13.0f} MB")
    if "reference" in rates:
        print(
            f"  ratio     {rates['ours'] / rates['reference']:.2f}x rows/s (wall), "
            f"{cpu['reference'] / cpu['ours']:.2f}x less CPU time"
        )
        identical = all(
            (REPORTS / "ours" / name).read_bytes() == (REPORTS / "reference" / name).read_bytes()
            for name in REPORT_FILES
        )
        print(f"  reports byte-identical: {identical}")
        return 0 if identical else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
