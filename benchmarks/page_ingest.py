"""The pause the live page's perf summary causes ingest: event POSTs while its first build runs.

One command (~6 min at 1M on two cores):

    .venv/bin/python benchmarks/page_ingest.py                 # against 57b58dd, before the cut
    .venv/bin/python benchmarks/page_ingest.py --phases served --rollouts 100000 --rounds 1

A journal of ``--rollouts`` completion facts (``benchmarks/fact_journal.py``) is written once,
then, for this build and for ``--baseline-ref`` (``git archive``, native extensions built),
replayed and snapshotted by that build and served by ``rollout-sidecar serve``. Each round
starts the server (so the page's perf summary is built cold, as after any start), posts one
``started`` event at a time, as fast as each is acknowledged, and meanwhile opens the run page
(``/v1/runs/{id}/page``) and polls it as the page does until the perf summary is there. Printed
per build: the build's time (from the first page request to the summary), the longest event
POST while it ran and the POSTs' median and p99 then, and the POST median before the page
opened; medians over ``--rounds``, and this build's figures over the baseline's. The ``pure``
phase first times ``PerfSummaryState.result()`` in process over random rows, cold and one row
later, per build.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.baseline import (
    quantile,
    unpack_baseline,
)
from benchmarks.fact_journal import RUN_ID, completed_templates, template_rows, write_journal  # noqa: E402
from benchmarks.state import serve  # noqa: E402

_PURE = """
import random, sys, time
sys.path.insert(0, sys.argv[1])
try:
    from sidecar.perf import PerfSummaryState
except ImportError:  # a build from before sidecar.perf exported it
    from sidecar.perf._perf_summary import PerfSummaryState
random.seed(1)
state = PerfSummaryState()
count = int(sys.argv[2])
for _ in range(count):
    state.add({"prompt_tokens": random.randrange(100, 5000), "completion_tokens": random.randrange(10, 2000),
               "cached_prompt_tokens": random.randrange(0, 100), "reasoning_tokens": random.randrange(0, 300),
               "num_turns": random.randrange(1, 8), "total_latency_ms": random.random() * 30000,
               "token_observability_coverage": 1.0})
began = time.perf_counter()
state.result(count)
cold = time.perf_counter() - began
state.add({"num_turns": 3, "total_latency_ms": 5.0})
began = time.perf_counter()
state.result(count + 1)
print(cold, time.perf_counter() - began)
"""

_PREPARE = """
import asyncio, sys
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from benchmarks.fact_journal import replay_and_snapshot
print(asyncio.run(replay_and_snapshot(Path(sys.argv[3])))[0])
"""


def _prepare(journal: Path, code: Path, into: Path) -> Path:
    """A copy of ``journal`` replayed and snapshotted by the build at ``code`` (its own pickles)."""
    into.mkdir(parents=True)
    copy = into / journal.name
    shutil.copy(journal, copy)
    subprocess.run(
        [sys.executable, "-c", _PREPARE, str(code), str(ROOT), str(copy)],
        check=True,
        cwd=into,
        capture_output=True,
    )
    return copy


async def _round(url: str, lead_s: float) -> tuple[float, float, float, float, float]:
    """``(build s, max POST ms while building, median ms then, p99 ms then, median ms before)``."""
    latencies: list[tuple[float, float]] = []  # (sent at, ms)
    stop = asyncio.Event()

    async def post(client: httpx.AsyncClient) -> None:
        index = 0
        while not stop.is_set():
            index += 1
            body = [{"kind": "started", "task_index": 10_000_000 + index, "rollout_index": 0}]
            sent = time.perf_counter()
            response = await client.post(f"/v1/runs/{RUN_ID}/events", json=body)
            assert response.status_code == 200, response.text[:200]
            latencies.append((sent, (time.perf_counter() - sent) * 1000))

    async with (
        httpx.AsyncClient(base_url=url, timeout=120) as poster,
        httpx.AsyncClient(base_url=url, timeout=120) as reader,
    ):
        task = asyncio.create_task(post(poster))
        await asyncio.sleep(lead_s)
        opened = time.perf_counter()
        while True:
            body = (await reader.get(f"/v1/runs/{RUN_ID}/page")).json()
            if body["perf_summary"] is not None and not body["perf_pending"]:
                break
            await asyncio.sleep(0.25)
        built = time.perf_counter()
        await asyncio.sleep(lead_s)
        stop.set()
        await task
    before = [ms for sent, ms in latencies if sent < opened]
    during = [ms for sent, ms in latencies if opened <= sent < built] or [0.0]
    return (
        built - opened,
        max(during),
        statistics.median(during),
        quantile(during, 0.99),
        statistics.median(before),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rollouts", type=int, default=1_000_000, help="the run's completions (default 1M)")
    parser.add_argument("--rounds", type=int, default=3, help="server starts per build (default 3)")
    parser.add_argument(
        "--baseline-ref",
        default="57b58dd",
        help="the build to compare with (default: the last before the cut; '' for none)",
    )
    parser.add_argument("--phases", default="pure,served", help="pure (result() in process), served")
    parser.add_argument("--lead-s", type=float, default=2.0, help="posting before and after the build")
    args = parser.parse_args()
    print(f"cpus {os.cpu_count()}; load average {os.getloadavg()[0]:.1f}; {args.rollouts:,} rollouts")
    columns = ("build s", "max POST ms", "median ms", "p99 ms", "median before")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        journal = tmp / "source" / "journal.sqlite3"
        if "served" in args.phases:
            began = time.perf_counter()
            templates = completed_templates(template_rows()[:200])
            asyncio.run(write_journal(journal, templates, args.rollouts, step_s=8 * 3600 / args.rollouts))
            print(f"journal written in {time.perf_counter() - began:.1f} s")
        builds: dict[str, Path] = {"this build": ROOT}
        if args.baseline_ref:
            builds[f"baseline {args.baseline_ref}"] = unpack_baseline(args.baseline_ref, tmp / "baseline")
        if "pure" in args.phases:
            print(f"\n## PerfSummaryState.result() in process, {args.rollouts:,} random rows (s)")
            pure = {}
            for label, code in builds.items():
                out = subprocess.run(
                    [sys.executable, "-c", _PURE, str(code), str(args.rollouts)],
                    check=True,
                    capture_output=True,
                    text=True,
                ).stdout.split()
                pure[label] = [float(x) for x in out]
                print(f"{label:<24} cold {pure[label][0]:.3f}   one row later {pure[label][1]:.3f}")
            if len(pure) == 2:
                (a, b) = pure.values()
                print(f"{'ratio':<24} cold x{a[0] / b[0]:.3f}   one row later x{a[1] / b[1]:.3f}")
        medians: dict[str, list[float]] = {}
        for label, code in builds.items() if "served" in args.phases else ():
            prepared = _prepare(journal, code, tmp / label.replace(" ", "-"))
            rounds = []
            for _ in range(args.rounds):
                with serve(prepared, code=None if code == ROOT else code) as (url, _pid):
                    rounds.append(asyncio.run(_round(url, args.lead_s)))
            medians[label] = [statistics.median(figures) for figures in zip(*rounds, strict=True)]
            print(f"\n## {label} ({args.rounds} rounds; medians)")
            for column, value, each in zip(columns, medians[label], zip(*rounds, strict=True), strict=True):
                print(f"{column:<16} {value:>10.3f}   rounds: {', '.join(f'{r:.3f}' for r in each)}")
    if len(medians) == 2:
        ours, base = medians.values()
        print("\n## this build / baseline (ratio of medians)")
        for column, a, b in zip(columns, ours, base, strict=True):
            print(f"{column:<16} x{a / b:.3f}" if b else f"{column:<16} -")
    print("\n[target: no event POST waits for the page's perf summary (seconds at 1M before)]")
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
