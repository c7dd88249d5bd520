"""Server CPU per answered read on a keep-alive connection, against a baseline build's.

One command::

    .venv/bin/python benchmarks/answer_cpu.py --baseline-ref HEAD~1            # ~1 min
    .venv/bin/python benchmarks/answer_cpu.py --baseline-ref main --rounds 5 --requests 10000

Each round starts a real ``rollout-sidecar serve`` of ``--baseline-ref``'s build (unpacked by
``benchmarks/baseline.py``) and one of this build, one after the other, with a run of 2,000
rollouts in flight; after a warm-up, one client asks each path ``--requests`` times back to back
on one connection, and the server process's CPU time (user + system, from ``/proc``) is divided
by the answers. Every read runs on the event loop, so its CPU is how long it holds the loop, the
time ``/drain_margin`` can wait behind it. Prints the median per path and build and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.baseline import unpack_baseline  # noqa: E402
from tests.reliability_harness.sidecar_process import SidecarProcess  # noqa: E402

PATHS = ("/v1/runs/r/inflight", "/healthz", "/drain_margin?run_id=r")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(workdir: Path, code: Path | None, requests: int) -> dict[str, float]:
    """Microseconds of server CPU per answer, per path, for one server of ``code``'s build."""
    sidecar = SidecarProcess(workdir / "journal.sqlite3", workdir / "sidecar.log", launch="exec", cwd=code)
    url = sidecar.start(timeout=300)
    try:
        assert sidecar.pid is not None
        with httpx.Client(base_url=url, timeout=60) as client:
            started = [{"kind": "started", "task_index": index} for index in range(2000)]
            client.post("/v1/runs/r/events", json=[{"kind": "run_started"}, *started]).raise_for_status()
            figures = {}
            for path in PATHS:
                for _ in range(300):
                    client.get(path).raise_for_status()
                before = _cpu_seconds(sidecar.pid)
                for _ in range(requests):
                    client.get(path)
                figures[path] = (_cpu_seconds(sidecar.pid) - before) / requests * 1e6
            return figures
    finally:
        sidecar.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline-ref", default="main")
    parser.add_argument("--rounds", type=int, default=3, choices=range(1, 21), metavar="1..20")
    parser.add_argument(
        "--requests", type=int, default=6000, choices=range(100, 100_001), metavar="100..100000"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="answer-cpu-") as tmp:
        root = Path(tmp)
        baseline = unpack_baseline(args.baseline_ref, root / "base")
        builds: dict[str, Path | None] = {args.baseline_ref: baseline, "this build": None}
        samples: dict[str, dict[str, list[float]]] = {name: {p: [] for p in PATHS} for name in builds}
        for round_ in range(args.rounds):  # interleaved: a busier minute hits both builds
            for name, code in builds.items():
                workdir = root / f"{name.replace(' ', '-')}-{round_}"
                workdir.mkdir()
                for path, value in measure(workdir, code, args.requests).items():
                    samples[name][path].append(value)
        print(f"server CPU per answer, us (median of {args.rounds} servers, {args.requests} reads each):")
        for path in PATHS:
            base = statistics.median(samples[args.baseline_ref][path])
            this = statistics.median(samples["this build"][path])
            ratio = this / base
            print(f"  {path:<24} {args.baseline_ref} {base:7.1f}  this build {this:7.1f}  ratio {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
