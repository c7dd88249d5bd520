"""Benchmark: ``rollout-sidecar health-check`` as a whole process, against the reference.

One command::

    .venv/bin/python benchmarks/health_check.py            # 20,000 rollouts, 3 runs each
    .venv/bin/python benchmarks/health_check.py --shards 4 --ray   # pool vs Ray, 1 -> 2 nodes
    .venv/bin/python benchmarks/health_check.py --fixed-cost --runs 15 --baseline-ref main
    .venv/bin/python benchmarks/health_check.py --row-classes --corpus faulty   # µs per row by path
    .venv/bin/python benchmarks/health_check.py --corpus faulty --baseline-ref main --split-cpu

generates (once; cached under ``benchmarks/out/health_corpus_<kind>_<N>/``) a run directory of
rollouts with ~8 KB of payload per model call, an all-healthy one and a fault-heavy one (see
``CORPORA``), then for each alternates runs of our CLI
and of NeMo Gym 0.7.0's (``refcli.py health-check``, only when the oracle is installed in
``/tmp/oracle``) on it. Each run is timed as a whole process; its peak memory is the
largest sum of resident set sizes over the whole process tree (the CLI and its pool
workers), sampled from ``/proc``. It prints the median wall time, rows/s, the peak RSS,
the ratio to the reference, and whether both tools wrote byte-identical reports. Our
packages' bytecode (and the ``--baseline-ref`` build's) is compiled before the first run, as
installing a wheel does and as the reference's install did, so no run compiles source.

With ``--ray`` it deals the rows over ``--shards`` files and times, in-process, the default
process pool against ``--ray`` on a local ``ray.cluster_utils.Cluster`` of one, then two,
one-CPU nodes (each after one warm-up run), and checks the reports are the same bytes.
"""

from __future__ import annotations

import argparse
import compileall
import contextlib
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
sys.path.insert(0, str(HERE.parent))

from benchmarks.baseline import PACKAGES  # noqa: E402
from benchmarks.baseline import unpack_baseline as _unpack  # noqa: E402

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
    parent_cpu_seconds: float | None = None
    """The CLI process's own user + system time, without its pool workers (``--split-cpu`` runs)."""


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


def measure(
    command: list[str], cwd: Path, interval: float = 0.02, env: dict[str, str] | None = None
) -> Measurement:
    """Run ``command``; return wall time, CPU time and the peak RSS summed over its process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
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
    own = [line for line in stderr.decode(errors="replace").splitlines() if line.startswith(_SPLIT_MARK)]
    parent = float(own[-1].split()[1]) if own else None
    return Measurement(seconds, cpu, peak, process.returncode, parent)


_SPLIT_MARK = "cpu-split:"
_SPLIT_CPU_CLI = f"""
import atexit, resource, sys

def _report() -> None:  # registered first, so it runs after the CLI's own exit hooks
    own = resource.getrusage(resource.RUSAGE_SELF)
    sys.stderr.write(f"{_SPLIT_MARK} {{own.ru_utime + own.ru_stime}}\\n")

atexit.register(_report)
from sidecar.cli import main
sys.exit(main(sys.argv[1:]))
"""
"""Our CLI, reporting on stderr at exit the CPU it used itself (the pool parent's share)."""


CORPORA = ("healthy", "faulty", "realistic")
"""``healthy``: no fault at all. ``faulty``: every fault kind at 5% (about 85% of rows carry one,
every check fires), plus torn lines and odd identities. ``realistic``: each fault at 0.5%."""


def _synthetic_rows(kind: str, rollouts: int) -> object:
    from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, generate_rows

    faults = {"healthy": FaultRates(), "faulty": FaultRates.mixed(0.05), "realistic": FaultRates.mixed(0.005)}
    config = SyntheticConfig(num_tasks=rollouts // 4, repeats_per_task=4, faults=faults[kind])
    return generate_rows(config, SEED)


def _lines(kind: str, rollouts: int) -> object:
    """Encoded rows; the faulty corpus also gets torn lines, blank lines and odd identities."""
    for number, row in enumerate(_synthetic_rows(kind, rollouts)):  # type: ignore[attr-defined]
        line = orjson.dumps(row)
        if kind == "faulty":
            if number % 97 == 0:
                line = line[: len(line) // 2]  # torn: record_unreadable
            elif number % 89 == 0:
                row.pop("_ng_task_index", None)  # identity from the ordinal
                line = orjson.dumps(row)
            elif number % 83 == 0:
                row["_ng_task_index"] = f"task-{row.get('_ng_task_index')}"  # string identity
                line = orjson.dumps(row)
            elif number % 79 == 0:
                line = b"  \r"  # blank
        yield line


def ensure_corpus(kind: str, rollouts: int, regenerate: bool, shards: int = 1) -> Path:
    """The cached corpus run directory, generated if missing or stale.

    One ``rollouts.jsonl``, or with ``shards`` > 1 the same rows dealt round-robin over
    ``rollouts-rs<i>-chunk0.jsonl`` files (checked with ``--glob``).
    """
    suffix = "" if shards == 1 else f"_x{shards}"
    corpus = OUT / f"health_corpus_{kind}_{rollouts}{suffix}"
    meta_path = corpus / "corpus.json"
    names = ["rollouts.jsonl"] if shards == 1 else [f"rollouts-rs{i}-chunk0.jsonl" for i in range(shards)]
    wanted = {
        "rollouts": rollouts,
        "seed": SEED,
        "generator": "sidecar.demo.synthetic",
        "kind": kind,
        "shards": shards,
    }
    cached = not regenerate and all((corpus / name).is_file() for name in names) and meta_path.is_file()
    if cached and json.loads(meta_path.read_text()).get("request") == wanted:
        return corpus
    corpus.mkdir(parents=True, exist_ok=True)
    print(f"generating {rollouts} {kind} rollouts into {corpus} ...", flush=True)
    started = time.perf_counter()
    count = 0
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(open(corpus / (name + ".tmp"), "wb")) for name in names]
        for line in _lines(kind, rollouts):  # type: ignore[attr-defined]
            handles[count % shards].write(line + b"\n")
            count += 1
    for name in names:
        (corpus / (name + ".tmp")).replace(corpus / name)
    size = sum((corpus / name).stat().st_size for name in names)
    meta = {"request": wanted, "lines": count, "bytes": size}
    meta_path.write_text(json.dumps(meta, indent=2))
    elapsed = time.perf_counter() - started
    print(f"  {count} lines, {size / 1e9:.2f} GB in {elapsed:.0f} s", flush=True)
    return corpus


def _clear_reports(run_dir: Path) -> None:
    for name in REPORT_FILES:
        (run_dir / name).unlink(missing_ok=True)


def _keep_reports(run_dir: Path, label: str) -> None:
    target = REPORTS / label
    target.mkdir(parents=True, exist_ok=True)
    for name in REPORT_FILES:
        shutil.copyfile(run_dir / name, target / name)


def unpack_baseline(ref: str) -> Path:
    """Our packages at commit ``ref``, unpacked once under ``benchmarks/out`` (``git archive``)."""
    root = HERE.parent
    sha = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--verify", f"{ref}^{{commit}}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    into = OUT / f"baseline-{sha[:12]}"
    if not (into / "health").is_dir():
        _unpack(ref, into)
    return into


def compile_bytecode(root: Path) -> None:
    """Write the bytecode of our packages under ``root``, as ``pip install`` does for a wheel and
    as the reference's install did: with ``PYTHONDONTWRITEBYTECODE`` set (or a fresh checkout)
    every timed run would otherwise compile the stale modules from source again."""
    for package in PACKAGES:
        compileall.compile_dir(root / package, quiet=1)


def _tools(
    run_dir: Path, args: argparse.Namespace
) -> tuple[dict[str, list[str]], dict[str, dict[str, str] | None]]:
    """The commands to alternate on ``run_dir`` (ours, ``--baseline-ref``'s, the reference's) and
    their environments; our bytecode (and the baseline's) compiled first."""
    ours_cli = Path(sys.executable).with_name("rollout-sidecar")
    tools: dict[str, list[str]] = {"ours": [str(ours_cli), "health-check", run_dir.name]}
    if args.split_cpu:
        tools["ours"] = [sys.executable, "-c", _SPLIT_CPU_CLI, "health-check", run_dir.name]
    compile_bytecode(HERE.parent)
    envs: dict[str, dict[str, str] | None] = {"ours": None, "reference": None}
    if args.baseline_ref:
        tools["baseline"] = [sys.executable, "-m", "sidecar.cli", "health-check", run_dir.name]
        if args.split_cpu:
            tools["baseline"] = [sys.executable, "-c", _SPLIT_CPU_CLI, "health-check", run_dir.name]
        baseline_root = unpack_baseline(args.baseline_ref)
        compile_bytecode(baseline_root)
        envs["baseline"] = {**os.environ, "PYTHONPATH": str(baseline_root)}
    if not args.no_reference and ORACLE.is_dir() and REFCLI.is_file():
        tools["reference"] = ["python3", str(REFCLI), "health-check", run_dir.name]
    if args.workers is not None:
        for command in tools.values():
            command += ["--workers", str(args.workers)]
    return tools, envs


def fixed_cost(args: argparse.Namespace) -> None:
    """What a run pays whatever its size: each CLI on a 3-rollout run directory, alternating;
    median CPU of the process tree (interpreter, imports, pool start-up, reports, exit)."""
    run_dir = OUT / "health_corpus_3_rollouts"
    run_dir.mkdir(parents=True, exist_ok=True)
    lines = list(_lines("healthy", 4))[:3]  # type: ignore[call-overload]
    (run_dir / "rollouts.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    tools, envs = _tools(run_dir, args)
    results: dict[str, list[Measurement]] = {label: [] for label in tools}
    for _ in range(args.runs):
        for label, command in tools.items():
            measured = measure(command, cwd=run_dir.parent, env=envs[label])
            if measured.returncode:
                raise SystemExit(f"{label} failed with exit code {measured.returncode}")
            results[label].append(measured)
    size = (run_dir / "rollouts.jsonl").stat().st_size
    print(f"\nfixed cost: 3 rollouts ({size / 1e3:.0f} KB), median of {args.runs} runs")
    print(f"  {'':9s} {'cpu ms':>8s} {'wall ms':>8s}")
    for label, measurements in results.items():
        cpu = statistics.median(m.cpu_seconds for m in measurements) * 1e3
        wall = statistics.median(m.seconds for m in measurements) * 1e3
        print(f"  {label:9s} {cpu:8.1f} {wall:8.1f}")


def compare(run_dir: Path, kind: str, args: argparse.Namespace) -> tuple[float | None, bool]:
    """Alternate our CLI, the baseline build and the reference on ``run_dir``; print medians;
    ``(ratio to the reference, identical)``."""
    tools, envs = _tools(run_dir, args)
    results: dict[str, list[Measurement]] = {label: [] for label in tools}
    for run in range(args.runs):
        for label, command in tools.items():
            _clear_reports(run_dir)
            measured = measure(command, cwd=run_dir.parent, env=envs[label])
            if measured.returncode:
                raise SystemExit(f"{label} failed with exit code {measured.returncode}")
            results[label].append(measured)
            if run == 0:
                _keep_reports(run_dir, f"{kind}-{label}")
            print(
                f"{kind:9s} run {run + 1} {label:9s} {measured.seconds:7.2f} s wall"
                f"  {measured.cpu_seconds:7.2f} s cpu  {measured.peak_rss / 2**20:6.0f} MB",
                flush=True,
            )

    summary = orjson.loads((REPORTS / f"{kind}-ours" / "quality_summary.json").read_bytes())
    rows = summary["run"]["artifacts"]["records"]
    unhealthy = summary["run"]["verdicts"]["unhealthy"]
    size = (run_dir / "rollouts.jsonl").stat().st_size
    print(
        f"\n{kind} corpus: {rows} rollouts ({unhealthy} unhealthy), {size / 1e9:.2f} GB; "
        f"median of {args.runs} runs"
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
    if args.split_cpu:
        for label, measurements in results.items():
            split = [m for m in measurements if m.parent_cpu_seconds is not None]
            if split:
                parent = statistics.median(m.parent_cpu_seconds or 0.0 for m in split)
                workers = statistics.median(m.cpu_seconds - (m.parent_cpu_seconds or 0.0) for m in split)
                print(
                    f"  {label:9s} parent {parent:6.3f} s cpu ({parent / rows * 1e6:5.2f} µs/row), "
                    f"workers {workers:6.3f} s ({workers / rows * 1e6:6.1f} µs/row)"
                )
    if "baseline" in rates:
        print(
            f"  vs baseline {args.baseline_ref}: {rates['ours'] / rates['baseline']:.2f}x rows/s (wall), "
            f"{cpu['baseline'] / cpu['ours']:.2f}x less CPU time"
        )
    if "reference" not in rates:
        return None, True
    ratio = rates["ours"] / rates["reference"]
    print(f"  ratio     {ratio:.2f}x rows/s (wall), {cpu['reference'] / cpu['ours']:.2f}x less CPU time")
    identical = all(
        (REPORTS / f"{kind}-ours" / name).read_bytes() == (REPORTS / f"{kind}-{other}" / name).read_bytes()
        for name in REPORT_FILES
        for other in results
    )
    print(f"  reports byte-identical: {identical}\n", flush=True)
    return ratio, identical


def ray_scaling(run_dir: Path, shards: int, args: argparse.Namespace) -> bool:
    """Process pool vs a local Ray cluster of one, then two, one-CPU nodes, on ``shards`` files."""
    try:
        import ray
        from ray.cluster_utils import Cluster
    except ImportError:
        raise SystemExit("--ray needs Ray: pip install '.[ray]' in the rollout-sidecar clone") from None
    from health.api import check_rollout_files
    from health.shards import resolve_shard_paths

    _, paths = resolve_shard_paths(run_dir, ["rollouts-*.jsonl"])
    workers = args.workers or 2
    out = OUT / "ray_reports"

    def timed(label: str, **options: object) -> tuple[float, bytes]:
        times = []
        for _ in range(args.runs):
            target = out / label
            started = time.perf_counter()
            check_rollout_files(paths, target, workers, (), **options)  # type: ignore[arg-type]
            times.append(time.perf_counter() - started)
        reports = b"".join((out / label / name).read_bytes() for name in REPORT_FILES)
        return statistics.median(times), reports

    results: dict[str, float] = {}
    pool_seconds, expected = timed("pool")
    results[f"process pool ({workers} workers)"] = pool_seconds
    node_args = {"num_cpus": 1, "object_store_memory": 200 << 20}
    started = time.perf_counter()
    cluster = Cluster(initialize_head=True, head_node_args={**node_args, "include_dashboard": False})
    ray.init(address=cluster.address, log_to_driver=False, logging_level="WARNING")
    print(f"ray cluster (1 node) up in {time.perf_counter() - started:.1f} s", flush=True)
    identical = True
    try:
        for nodes in (1, 2):
            if nodes == 2:
                cluster.add_node(**node_args)
                cluster.wait_for_nodes()
            timed(f"ray-warmup-{nodes}", ray_address="auto")  # start each node's worker once
            seconds, reports = timed(f"ray-{nodes}", ray_address="auto")
            results[f"ray, {nodes} node(s) x 1 CPU"] = seconds
            identical = identical and reports == expected
    finally:
        ray.shutdown()
        cluster.shutdown()
    summary = orjson.loads((out / "pool" / "quality_summary.json").read_bytes())
    rows = summary["run"]["artifacts"]["records"]
    size = sum(path.stat().st_size for path in paths)
    print(
        f"\n{len(paths)} shards, {rows} rollouts, {size / 1e9:.2f} GB; median of {args.runs} in-process runs"
    )
    print(f"  {'':30s} {'wall s':>8s} {'rows/s':>8s} {'vs pool':>8s}")
    for label, seconds in results.items():
        print(f"  {label:30s} {seconds:8.2f} {rows / seconds:8.0f} {pool_seconds / seconds:7.2f}x")
    one, two = results["ray, 1 node(s) x 1 CPU"], results["ray, 2 node(s) x 1 CPU"]
    print(f"  scaling 1 -> 2 nodes: {one / two:.2f}x rows/s")
    print(f"  reports byte-identical to the process pool: {identical}")
    return identical


def parent_share(run_dir: Path, kind: str) -> None:
    """The parent's CPU per row, by stage: what crosses the pool (pickled outcomes) and what the
    parent does with it. The splits are digested serially first (the workers' share, not timed)."""
    import gc
    import pickle

    from health.reduce import HealthReducer
    from health.report import render_summary, write_reports
    from health.runner import _plan
    from health.splits import SplitPlacer, digest_split

    paths = [str(run_dir / "rollouts.jsonl")]
    splits = _plan(paths, 2, os.path.getsize(paths[0]))
    outcomes = [digest_split(split, frozenset()) for split in splits]
    rows = sum(outcome.records for outcome in outcomes)
    collecting = gc.isenabled()
    gc.disable()  # as the pool parent runs
    try:
        marks = [time.process_time()]
        blobs = [pickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL) for outcome in outcomes]
        marks.append(time.process_time())
        received = [pickle.loads(blob) for blob in blobs]
        marks.append(time.process_time())
        reducer, placer = HealthReducer(frozenset()), SplitPlacer(splits, frozenset())
        for outcome in received:
            reducer.extend(placer.add(outcome))
        marks.append(time.process_time())
        summary = reducer.summary()
        marks.append(time.process_time())
        write_reports(OUT / "parent_share", render_summary(summary), reducer.iter_verdict_lines())
        marks.append(time.process_time())
    finally:
        if collecting:
            gc.enable()
    finished = sum(len(outcome.unreadable) + len(outcome.by_ordinal) for outcome in outcomes)
    print(f"\n{kind}: parent share, µs of CPU per row ({rows} rows, {finished} placed by position)")
    print(f"  pickled bytes per row: {sum(map(len, blobs)) / rows:.0f}")
    stages = ("pickle (worker side)", "unpickle", "place + reduce", "summary", "write reports")
    for name, start, end in zip(stages, marks, marks[1:], strict=False):
        print(f"  {name:22s} {(end - start) / rows * 1e6:6.2f}")


def _row_class(line: bytes, ordinal: int) -> str:
    """Which road the per-record step takes for ``line``, and the verdict it reaches."""
    from health.compact import VERDICTS
    from health.contract.strict import strict_trajectory
    from health.digest import OrdinalIdentity, UnreadableLine, digest_line_compact

    digest, dependence = digest_line_compact(
        line, source_path="r.jsonl", source_index=0, line_number=ordinal + 1, ordinal=ordinal
    )
    if isinstance(dependence, UnreadableLine):
        return "unreadable (" + str(dependence.detail.get("error")) + ")"
    trajectory = orjson.loads(line).get("ng_trajectory")
    road = "no trajectory" if trajectory is None else "contract"
    if trajectory is not None and strict_trajectory(trajectory) is not None:
        road = "derived structs"
    suffix = ", no _ng_task_index" if isinstance(dependence, OrdinalIdentity) else ""
    return f"{road}: {VERDICTS[digest.verdict]}{suffix}"


def row_classes(run_dir: Path, kind: str, sample: int, runs: int) -> None:
    """The per-record step's CPU per row by the road each row takes (in process, lines in memory,
    the minimum over ``runs`` passes), over the corpus' first ``sample`` lines."""
    import itertools

    from health.digest import digest_line_compact
    from health.jsonl import is_blank
    from health.splits import iter_split_lines

    path = str(run_dir / "rollouts.jsonl")
    head = itertools.islice(iter_split_lines(path, 0, 1 << 62), sample)
    lines = [line for line in head if not is_blank(line)]
    classes: dict[str, list[bytes]] = {}
    for ordinal, line in enumerate(lines):
        classes.setdefault(_row_class(line, ordinal), []).append(line)
    print(f"\n{kind}: the per-record step by road, µs of CPU per row ({len(lines)} records, min of {runs})")
    print(f"  {'road: verdict':44s} {'share':>6s} {'µs/row':>7s} {'µs/corpus row':>14s}")
    total = 0.0
    for name, members in sorted(classes.items(), key=lambda item: -len(item[1])):
        best = float("inf")
        for _ in range(runs):
            started = time.process_time()
            for ordinal, line in enumerate(members):
                digest_line_compact(
                    line, source_path="r.jsonl", source_index=0, line_number=ordinal + 1, ordinal=ordinal
                )
            best = min(best, time.process_time() - started)
        per_row = best / len(members) * 1e6
        share = len(members) / len(lines)
        total += per_row * share
        print(f"  {name:44s} {share:6.1%} {per_row:7.1f} {per_row * share:14.1f}")
    print(f"  {'all records':44s} {1:6.1%} {total:7.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workers", type=int, default=None, help="passed to both tools (default: theirs)")
    parser.add_argument(
        "--corpus",
        choices=CORPORA,
        action="append",
        default=None,
        help="corpus kind (repeatable; default: healthy and faulty)",
    )
    parser.add_argument("--shards", type=int, default=1, help="deal the rows over K shard files (with --ray)")
    parser.add_argument(
        "--ray", action="store_true", help="process pool vs a local 1- then 2-node Ray cluster"
    )
    parser.add_argument("--no-reference", action="store_true", help="time our CLI alone")
    parser.add_argument(
        "--baseline-ref",
        default=None,
        help="also time our CLI as of this commit (git archive), alternating, for a before/after",
    )
    parser.add_argument("--regenerate", action="store_true")
    parser.add_argument(
        "--split-cpu",
        action="store_true",
        help="also print the CLI process's own CPU (the pool parent) apart from its workers'",
    )
    parser.add_argument(
        "--fixed-cost",
        action="store_true",
        help="instead, time each CLI on a 3-rollout run directory (use --runs 15 or more)",
    )
    parser.add_argument(
        "--parent-share",
        action="store_true",
        help="instead of timing whole runs, split the pool parent's CPU per row by stage",
    )
    parser.add_argument(
        "--row-classes",
        action="store_true",
        help="instead, the per-record step's CPU per row by road (derived structs, contract, unreadable)",
    )
    parser.add_argument("--sample-rows", type=int, default=2000, help="lines read for --row-classes")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    print(f"cpus: {os.cpu_count()}, load average (1 min): {load:.2f}", flush=True)
    kinds = args.corpus or ["healthy", "faulty"]

    if args.ray:
        ok = True
        for kind in kinds:
            run_dir = ensure_corpus(kind, args.rollouts, args.regenerate, max(2, args.shards))
            ok = ray_scaling(run_dir, max(2, args.shards), args) and ok
        return 0 if ok else 1

    if args.fixed_cost:
        fixed_cost(args)
        return 0

    if args.row_classes:
        for kind in kinds:
            run_dir = ensure_corpus(kind, args.rollouts, args.regenerate)
            row_classes(run_dir, kind, args.sample_rows, args.runs)
        return 0

    if args.parent_share:
        for kind in kinds:
            parent_share(ensure_corpus(kind, args.rollouts, args.regenerate), kind)
        return 0

    outcome: dict[str, tuple[float | None, bool]] = {}
    for kind in kinds:
        outcome[kind] = compare(ensure_corpus(kind, args.rollouts, args.regenerate), kind, args)
    for kind, (ratio, identical) in outcome.items():
        shown = "n/a (no reference)" if ratio is None else f"{ratio:.2f}x"
        print(f"{kind:9s} ours vs reference: {shown} rows/s, byte-identical: {identical}")
    return 0 if all(identical for _, identical in outcome.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
