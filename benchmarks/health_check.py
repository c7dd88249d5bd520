"""Benchmark: ``rollout-sidecar health-check`` as a whole process, against NeMo Gym 0.7.0.

Generates (once, cached under ``benchmarks/out/``) a corpus of ~8 KB-a-call rollouts, then alternates
our CLI, ``--baseline-ref``'s build and NeMo Gym's (when ``/tmp/oracle`` is installed), timing each
as a process tree (wall, CPU, peak RSS). Target: >= 5x the reference's rows/s, byte-identical reports.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from benchmarks.baseline import PACKAGES, unpack_baseline  # noqa: E402

OUT = HERE / "out"
REPORTS = OUT / "health_reports"
# The reference, when a shared checkout is beside the repository (optional: skipped without it).
SHARED = Path(os.environ.get("ROLLOUT_SIDECAR_SHARED", HERE.parent.parent / "shared"))
REFCLI = SHARED / "tools" / "reference" / "refcli.py"
ORACLE = Path("/tmp/oracle")
REPORT_FILES = ("quality_summary.json", "rollout_verdicts.jsonl")
SEED = 20261202
CORPORA = ("healthy", "faulty", "realistic")
"""``healthy``: no fault at all. ``faulty``: every fault kind at 5% (about 85% of rows carry one,
every check fires), plus torn lines and odd identities. ``realistic``: each fault at 0.5%."""


@dataclass(frozen=True)
class Measurement:
    seconds: float
    cpu_seconds: float
    """User + system time of the whole process tree (every waited-for descendant)."""
    peak_rss: int


def _tree_rss(root: int) -> int:
    """Resident bytes of ``root`` and every descendant (``/proc``; vanished processes count 0)."""
    total, stack = 0, [root]
    while stack:
        pid = stack.pop()
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            total += next(int(ln.split()[1]) * 1024 for ln in status.splitlines() if ln.startswith("VmRSS:"))
            for task in os.listdir(f"/proc/{pid}/task"):
                stack.extend(int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split())
        except (OSError, StopIteration):
            pass
    return total


def measure(command: list[str], cwd: Path, env: dict[str, str] | None) -> Measurement:
    """Run ``command``; wall time, CPU time and peak RSS summed over its tree. Exits on failure."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    peak, stop = 0, threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_rss(process.pid))
            stop.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    _, stderr = process.communicate()
    seconds = time.perf_counter() - start
    stop.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if process.returncode:
        sys.stderr.write(stderr.decode(errors="replace"))
        raise SystemExit(f"{command[:3]} failed with exit code {process.returncode}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Measurement(seconds, cpu, peak)


def _lines(kind: str, rollouts: int) -> Iterator[bytes]:
    """Encoded rows; the faulty corpus also gets torn lines, blank lines and odd identities."""
    from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, generate_rows

    faults = {"healthy": FaultRates(), "faulty": FaultRates.mixed(0.05), "realistic": FaultRates.mixed(0.005)}
    config = SyntheticConfig(num_tasks=rollouts // 4, repeats_per_task=4, faults=faults[kind])
    for number, row in enumerate(generate_rows(config, SEED)):
        if kind == "faulty":
            if number % 97 == 0:
                line = orjson.dumps(row)
                yield line[: len(line) // 2]  # torn: record_unreadable
                continue
            if number % 89 == 0:
                row.pop("_ng_task_index", None)  # identity from the ordinal
            elif number % 83 == 0:
                row["_ng_task_index"] = f"task-{row.get('_ng_task_index')}"  # string identity
            elif number % 79 == 0:
                yield b"  \r"  # blank
                continue
        yield orjson.dumps(row)


def ensure_corpus(kind: str, rollouts: int, regenerate: bool) -> Path:
    """The cached corpus run directory, generated if missing or made for other parameters."""
    corpus = OUT / f"health_corpus_{kind}_{rollouts}"
    meta_path, data = corpus / "corpus.json", corpus / "rollouts.jsonl"
    wanted = {"rollouts": rollouts, "seed": SEED, "generator": "sidecar.demo.synthetic", "kind": kind}
    cached = not regenerate and data.is_file() and meta_path.is_file()
    if cached and json.loads(meta_path.read_text()).get("request") == wanted:
        return corpus
    corpus.mkdir(parents=True, exist_ok=True)
    print(f"generating {rollouts} {kind} rollouts into {corpus} ...", flush=True)
    started, count = time.perf_counter(), 0
    with open(data.with_suffix(".tmp"), "wb") as handle:
        for line in _lines(kind, rollouts):
            handle.write(line + b"\n")
            count += 1
    data.with_suffix(".tmp").replace(data)
    size = data.stat().st_size
    meta_path.write_text(json.dumps({"request": wanted, "lines": count, "bytes": size}, indent=2))
    print(f"  {count} lines, {size / 1e9:.2f} GB in {time.perf_counter() - started:.0f} s", flush=True)
    return corpus


def _tools(run_dir: Path, args: argparse.Namespace) -> dict[str, tuple[list[str], dict[str, str] | None]]:
    """The commands to alternate on ``run_dir`` and their environments; bytecode compiled first
    (with ``PYTHONDONTWRITEBYTECODE`` or a fresh checkout every run would compile from source)."""
    roots = [HERE.parent]
    ours = [str(Path(sys.executable).with_name("rollout-sidecar")), "health-check", run_dir.name]
    tools: dict[str, tuple[list[str], dict[str, str] | None]] = {"ours": (ours, None)}
    if args.baseline_ref:
        sha = subprocess.run(
            ["git", "-C", str(HERE.parent), "rev-parse", "--verify", f"{args.baseline_ref}^{{commit}}"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        root = OUT / f"baseline-{sha[:12]}"
        if not (root / "health").is_dir():
            unpack_baseline(sha, root)
        roots.append(root)
        command = [sys.executable, "-m", "sidecar.cli", "health-check", run_dir.name]
        tools["baseline"] = (command, {**os.environ, "PYTHONPATH": str(root)})
    if not args.no_reference and ORACLE.is_dir() and REFCLI.is_file():
        tools["reference"] = (["python3", str(REFCLI), "health-check", run_dir.name], None)
    for root in roots:
        for package in PACKAGES:
            compileall.compile_dir(root / package, quiet=1)
    return tools


def compare(run_dir: Path, kind: str, args: argparse.Namespace) -> tuple[float | None, bool]:
    """Alternate the tools on ``run_dir``; print medians; ``(ratio to the reference, identical)``."""
    tools = _tools(run_dir, args)
    results: dict[str, list[Measurement]] = {label: [] for label in tools}
    for run in range(args.runs):
        for label, (command, env) in tools.items():
            for name in REPORT_FILES:
                (run_dir / name).unlink(missing_ok=True)
            measured = measure(command, run_dir.parent, env)
            results[label].append(measured)
            if run == 0:  # keep each tool's reports for the byte comparison
                (REPORTS / f"{kind}-{label}").mkdir(parents=True, exist_ok=True)
                for name in REPORT_FILES:
                    shutil.copyfile(run_dir / name, REPORTS / f"{kind}-{label}" / name)
            print(
                f"{kind:9s} run {run + 1} {label:9s} {measured.seconds:7.2f} s wall"
                f"  {measured.cpu_seconds:7.2f} s cpu  {measured.peak_rss / 2**20:6.0f} MB",
                flush=True,
            )
    summary = orjson.loads((REPORTS / f"{kind}-ours" / "quality_summary.json").read_bytes())
    rows = summary["run"]["artifacts"]["records"]
    size = (run_dir / "rollouts.jsonl").stat().st_size
    print(
        f"\n{kind} corpus: {rows} rollouts ({summary['run']['verdicts']['unhealthy']} unhealthy), "
        f"{size / 1e9:.2f} GB; median of {args.runs} runs"
    )
    rates: dict[str, float] = {}
    cpu: dict[str, float] = {}
    print(f"  {'':9s} {'wall s':>8s} {'rows/s':>8s} {'cpu s':>8s} {'peak RSS (tree)':>16s}")
    for label, measurements in results.items():
        seconds = statistics.median(m.seconds for m in measurements)
        cpu[label] = statistics.median(m.cpu_seconds for m in measurements)
        rates[label] = rows / seconds
        peak = max(m.peak_rss for m in measurements)
        print(f"  {label:9s} {seconds:8.2f} {rates[label]:8.0f} {cpu[label]:8.2f} {peak / 2**20:13.0f} MB")
    for other in ("baseline", "reference"):
        if other in rates:
            print(
                f"  vs {other:9s} {rates['ours'] / rates[other]:.2f}x rows/s (wall), "
                f"{cpu[other] / cpu['ours']:.2f}x less CPU time"
            )
    identical = all(
        (REPORTS / f"{kind}-ours" / name).read_bytes() == (REPORTS / f"{kind}-{other}" / name).read_bytes()
        for name in REPORT_FILES
        for other in results
    )
    print(f"  reports byte-identical: {identical}\n", flush=True)
    return (rates["ours"] / rates["reference"] if "reference" in rates else None), identical


def main() -> int:
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--rollouts", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--corpus", choices=CORPORA, action="append", help="repeatable; default: healthy and faulty"
    )
    parser.add_argument("--no-reference", action="store_true", help="leave NeMo Gym 0.7.0 out")
    parser.add_argument(
        "--baseline-ref", default=None, help="also time our CLI as of this commit (git archive), alternating"
    )
    parser.add_argument("--regenerate", action="store_true", help="write the corpus again")
    args = parser.parse_args()
    python = sys.version.split()[0]  # NeMo Gym 0.7.0 requires 3.13: compare on it too (a 3.13 venv)
    print(f"cpus: {os.cpu_count()}, load (1 min): {os.getloadavg()[0]:.2f}, ours on {python}", flush=True)
    outcome = {
        kind: compare(ensure_corpus(kind, args.rollouts, args.regenerate), kind, args)
        for kind in args.corpus or ["healthy", "faulty"]
    }
    for kind, (ratio, identical) in outcome.items():
        shown = "n/a (no reference)" if ratio is None else f"{ratio:.2f}x"
        print(f"{kind:9s} ours vs reference: {shown} rows/s (target >= 5x), byte-identical: {identical}")
    return 0 if all(identical for _, identical in outcome.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
