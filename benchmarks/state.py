"""State benchmark: journal size, restart-to-ready and resident memory of long runs, and ingest.

One command: ``.venv/bin/python benchmarks/state.py`` (``--help`` for sizes). It measures, on
this machine and in one run:

* durable ingest of ~8 KB-payload rows over loopback HTTP (32 clients, 16 rows a request, as
  ``dispatcher_client`` batches), for this build and for a *baseline* build (``--baseline-ref``,
  default the commit before facts were journaled: the service that journaled rows) started from a
  ``git archive`` of that commit; rows/s as the median of ``--repeats`` interleaved rounds, the
  ratio to the baseline, and the journal bytes per rollout each build wrote;
* byte-identity: a run posted in order, the service stopped and restarted, then
  ``/report/quality_summary.json`` and ``/report/verdicts`` compared with ``health-check``
  over the same rows;
* for each of ``--sizes`` rollouts (default 100k and 1M): a journal of that many completion
  facts is written directly (facts of generated ~8 KB rows with fresh identities: the point is
  the state, not the payload), replayed once in-process (the full-journal replay time), a
  snapshot taken (journal compacted), then ``rollout-sidecar serve`` is started on it and timed
  until ``/readyz`` answers 200 and ``/drain_margin`` answers; its resident memory per rollout is
  its RSS minus an empty service's, over the rollouts;
* 10M rollouts: measured only if listed in ``--sizes``; otherwise a labelled extrapolation: the
  empty service's start plus the largest measured size's remaining time scaled to 10M.

Targets (issue 11): journal <= 512 B per rollout, restart-to-ready <= 2 s at 1M and <= 10 s at
10M, <= 200 B resident per rollout, ingest no slower than the baseline, report == batch.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.baseline import unpack_baseline  # noqa: E402
from benchmarks.ingest import Bench  # noqa: E402
from health import health_check_run_dir  # noqa: E402
from sidecar.engines import default_engines  # noqa: E402
from sidecar.events import EventBatch, RunStarted  # noqa: E402
from sidecar.fact_derivation import derive_fact  # noqa: E402
from sidecar.ingest import Ingestor  # noqa: E402
from sidecar.journal import (  # noqa: E402
    CompletedFact,
    Journal,
    JournalEvent,
    RunStartedFact,
    SnapshotStore,
    encode_fact,
)
from sidecar.synthetic import SyntheticConfig, generate_rows  # noqa: E402
from tests.reliability_harness.sidecar_process import SidecarProcess, free_port  # noqa: E402

REPEATS_PER_TASK = 4


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.glob("*") if p.is_file()) if path.exists() else 0


def _journal_bytes(journal: Path) -> int:
    return sum(p.stat().st_size for p in journal.parent.glob(journal.name + "*") if p.is_file())


@contextlib.contextmanager
def serve(
    journal: Path, *, code: Path | None = None, extra: tuple[str, ...] = ()
) -> Iterator[tuple[str, int]]:
    """``rollout-sidecar serve`` (this build, or the build unpacked at ``code``); yields (url, pid)
    once ``/readyz`` answers. Stopped with SIGTERM (graceful: the journal is checkpointed)."""
    port = free_port()
    process = SidecarProcess(
        journal,
        journal.with_name(f"serve-{port}.log"),
        port=port,
        extra_args=extra,
        log_level="warning",
        cwd=code,
    )
    url = process.start(timeout=600)
    try:
        assert process.pid is not None
        yield url, process.pid
    finally:
        process.stop(timeout=120)


def _rows() -> list[dict[str, Any]]:
    config = SyntheticConfig(
        num_tasks=400, repeats_per_task=1, model_calls_per_rollout=2, payload_bytes_per_call=1200
    )
    return list(generate_rows(config, 1))


# -- ingest -----------------------------------------------------------------------------------


async def _ingest_round(url: str, rows: list[dict[str, Any]], count: int, clients: int, batch: int) -> float:
    port = int(url.rsplit(":", 1)[1])
    bench = Bench(port, rows)
    await bench.start_run("ingest")

    async def post(client: Any) -> None:
        status, reply = await client.request("POST", "/v1/runs/ingest/events", bench.body("ingest", batch))
        assert status == 200, reply[:200]

    elapsed = await bench.closed_loop(clients, count // batch, post)
    return count // batch * batch / elapsed


def ingest_phase(args: argparse.Namespace, rows: list[dict[str, Any]], tmp: Path) -> None:
    builds: dict[str, Path | None] = {"this build": None}
    if args.baseline_ref:
        builds = {
            f"baseline {args.baseline_ref[:12]}": unpack_baseline(args.baseline_ref, tmp / "baseline"),
            **builds,
        }
    rates: dict[str, list[float]] = {name: [] for name in builds}
    sizes: dict[str, list[float]] = {name: [] for name in builds}
    for repeat in range(args.repeats):  # interleaved, so both builds see the same machine noise
        for name, code in builds.items():
            journal = tmp / f"ingest-{repeat}-{name.split()[0]}" / "journal.sqlite3"
            with serve(journal, code=code) as (url, _):
                rates[name].append(asyncio.run(_ingest_round(url, rows, args.ingest_rows, 32, 16)))
            count = args.ingest_rows // 16 * 16
            sizes[name].append(_journal_bytes(journal) / count)
    mean_row = statistics.mean(len(orjson.dumps(r)) for r in rows)
    print(
        f"\n## durable ingest, {args.ingest_rows:,} rows of {mean_row / 1024:.1f} KiB, "
        "32 clients x 16 rows/request"
    )
    base = None
    for name in builds:
        rate = statistics.median(rates[name])
        base = base or rate
        print(
            f"{name:>22}: {rate:8,.0f} rows/s (median of {args.repeats}: "
            f"{', '.join(f'{r:,.0f}' for r in rates[name])}), ratio {rate / base:.2f}; "
            f"journal {statistics.median(sizes[name]):,.0f} B/rollout"
        )
    print("  [targets: ingest ratio >= 1.0 (no slower), journal <= 512 B/rollout]")


# -- report == batch after a restart -----------------------------------------------------------


def equality_phase(args: argparse.Namespace, rows: list[dict[str, Any]], tmp: Path) -> None:
    journal = tmp / "equality" / "journal.sqlite3"
    run_dir = tmp / "equality" / "run"
    run_dir.mkdir(parents=True)
    lines = []
    events = []
    for index in range(args.equality_rows):
        row = dict(rows[index % len(rows)])
        row["_ng_task_index"] = index // 2
        row["_ng_rollout_index"] = index % 2
        lines.append(orjson.dumps(row) + b"\n")
        events.append({"kind": "completed", "seconds": 1.0 + index % 600, "row": row})
    (run_dir / "rollouts.jsonl").write_bytes(b"".join(lines))
    started = {"kind": "run_started", "source_path": str(run_dir / "rollouts.jsonl")}
    with serve(journal) as (url, _), httpx.Client(base_url=url, timeout=60) as client:
        everything = [started, *events, {"kind": "run_ended"}]
        for start in range(0, len(everything), 64):
            assert client.post("/v1/runs/eq/events", json=everything[start : start + 64]).status_code == 200
    with serve(journal) as (url, _), httpx.Client(base_url=url, timeout=60) as client:
        summary = client.get("/report/quality_summary.json", params={"run_id": "eq"}).content
        verdicts = client.get("/report/verdicts", params={"run_id": "eq"}).content
    batch = health_check_run_dir(run_dir, workers=1)
    same = summary == batch.summary_path.read_bytes() and verdicts == batch.verdicts_path.read_bytes()
    print(
        f"\n## report after restart vs health-check over the same {args.equality_rows:,} rows: "
        f"{'byte-identical' if same else 'DIFFERENT'}"
    )
    if not same:
        raise SystemExit(1)


# -- state at scale -----------------------------------------------------------------------------


def _templates(rows: list[dict[str, Any]]) -> list[CompletedFact]:
    engines = default_engines()
    settings = ("rollouts.jsonl", frozenset[str]())
    out = []
    for index, row in enumerate(rows):
        row = {**row, "_ng_task_index": 0, "_ng_rollout_index": 0}
        event = EventBatch.validate_python([{"kind": "completed", "seconds": 1.0 + index, "row": row}])[0]
        fact = derive_fact(event, received_at=0.0, engines=engines, settings=settings)
        assert isinstance(fact, CompletedFact) and fact.digest is not None
        out.append(fact)
    return out


def _facts(templates: list[CompletedFact], count: int) -> Iterator[tuple[str, bytes]]:
    t0 = 1.8e9
    for index in range(count):
        task, rollout = divmod(index, REPEATS_PER_TASK)
        template = templates[index % len(templates)]
        digest = list(template.digest or ())
        digest[0], digest[1], digest[3] = task, rollout, f"{task}-{rollout}"
        fact = template._replace(
            received_at=t0 + index * 0.01,
            seconds=1.0 + (index * 7919) % 3600,
            task=task,
            rollout=rollout,
            digest=tuple(digest),
        )
        yield f"bench|completed|{index}", encode_fact(fact)


async def _write_journal(path: Path, templates: list[CompletedFact], count: int) -> None:
    journal = Journal(path, max_batch=20_000)
    await journal.open()
    plan = {str(task): REPEATS_PER_TASK for task in range(count // REPEATS_PER_TASK)}
    config = orjson.dumps(RunStarted(kind="run_started", plan=plan).model_dump(exclude_none=True))
    start = encode_fact(RunStartedFact(1.8e9 - 1, 0, config, None))
    await journal.append(
        [JournalEvent(run_id="big", kind="run_started", key="bench|run_started", payload=start)]
    )
    chunk: list[JournalEvent] = []
    for key, payload in _facts(templates, count):
        chunk.append(JournalEvent(run_id="big", kind="completed", key=key, payload=payload))
        if len(chunk) == 20_000:
            await journal.append(chunk)
            chunk = []
    if chunk:
        await journal.append(chunk)
    await journal.close()


async def _replay_and_snapshot(path: Path) -> tuple[float, float, int]:
    journal = Journal(path)
    await journal.open()
    store = SnapshotStore.beside(path, keep=1)
    ingestor = Ingestor(journal, default_engines(), snapshots=store)
    began = time.perf_counter()
    await asyncio.to_thread(ingestor.replay)
    replay_s = time.perf_counter() - began
    began = time.perf_counter()
    await ingestor.snapshot()
    snapshot_s = time.perf_counter() - began
    await journal.close()
    return replay_s, snapshot_s, _dir_bytes(store.directory)


def _restart(journal: Path, *, run_expected: bool = True) -> tuple[float, int]:
    """Seconds from spawning ``serve`` until /readyz is 200 and /drain_margin answers; its RSS."""
    began = time.perf_counter()
    with serve(journal) as (url, pid):
        response = httpx.get(f"{url}/drain_margin", params={"run_id": "big"}, timeout=30)
        ready_s = time.perf_counter() - began
        assert response.status_code == (200 if run_expected else 404), response.text
        return ready_s, _rss_bytes(pid)


def state_phase(args: argparse.Namespace, rows: list[dict[str, Any]], tmp: Path) -> None:
    templates = _templates(rows[:200])
    empties = [_restart(tmp / "empty" / "journal.sqlite3", run_expected=False) for _ in range(args.restarts)]
    empty_ready = statistics.median(seconds for seconds, _ in empties)
    empty_rss = statistics.median(rss for _, rss in empties)
    print(
        f"\n## state at scale (empty service: ready in {empty_ready:.2f} s, RSS {empty_rss / 2**20:.0f} MiB)"
    )
    measured: list[tuple[int, float, float]] = []
    for count in args.sizes:
        journal = tmp / f"state-{count}" / "journal.sqlite3"
        began = time.perf_counter()
        asyncio.run(_write_journal(journal, templates, count))
        write_s = time.perf_counter() - began
        facts_bytes = _journal_bytes(journal)
        replay_s, snapshot_s, snapshot_bytes = asyncio.run(_replay_and_snapshot(journal))
        gc.collect()
        compacted_bytes = _journal_bytes(journal)
        restarts = [_restart(journal) for _ in range(args.restarts)]
        ready_s = statistics.median(seconds for seconds, _ in restarts)
        rss = statistics.median(rss for _, rss in restarts)
        each = ", ".join(f"{seconds:.2f}" for seconds, _ in restarts)
        per_rollout_rss = (rss - empty_rss) / count
        measured.append((count, ready_s, per_rollout_rss))
        print(
            f"{count:>12,} rollouts: journal {facts_bytes / count:,.0f} B/rollout of facts "
            f"({compacted_bytes / count:,.0f} B after compaction; "
            f"snapshot {snapshot_bytes / count:,.0f} B/rollout); "
            f"full-journal replay {replay_s:,.1f} s; snapshot {snapshot_s:,.1f} s; "
            f"restart to ready {ready_s:,.2f} s (median of {each}); "
            f"resident {per_rollout_rss:,.0f} B/rollout "
            f"(journal written in {write_s:,.1f} s)"
        )
        shutil.rmtree(journal.parent)
    if 10_000_000 not in args.sizes and measured:
        # restart(N) = an empty service's start + a cost proportional to N, the proportional part
        # taken from the largest size measured (a two-point slope drowns in the machine's noise).
        n2, t2, m2 = measured[-1]
        per_rollout = max(t2 - empty_ready, 0.0) / n2
        estimate = empty_ready + per_rollout * 10_000_000
        print(
            f"  10,000,000 rollouts: EXTRAPOLATED (not measured: empty start {empty_ready:.2f} s + "
            f"{per_rollout * 1e6:.2f} s per million rollouts, from {n2:,}): restart to ready "
            f"~{estimate:,.1f} s, resident ~{m2:,.0f} B/rollout (~{m2 * 10_000_000 / 2**30:,.1f} GiB)"
        )
    print(
        "  [targets: journal <= 512 B/rollout, restart <= 2 s at 1M and <= 10 s at 10M, "
        "resident <= 200 B/rollout]"
    )


def _before_facts() -> str:
    """The commit before facts were journaled on this history's first-parent line: the parent of
    the commit (on a branch) or merge (on ``main``) that brought ``sidecar/journal/_facts.py`` in."""
    with contextlib.suppress(subprocess.CalledProcessError):
        added = subprocess.run(
            ["git", "-C", str(ROOT), "log", "--first-parent", "--diff-filter=A", "--format=%H", "--",
             "sidecar/journal/_facts.py"],
            check=True, capture_output=True, text=True,
        ).stdout.split()  # fmt: skip
        if added:
            parent = ["git", "-C", str(ROOT), "rev-parse", f"{added[-1]}^1"]
            return subprocess.run(parent, check=True, capture_output=True, text=True).stdout.strip()
    return ""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100000,1000000", help="comma-separated rollout counts")
    parser.add_argument("--ingest-rows", type=int, default=8000)
    parser.add_argument("--equality-rows", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--restarts", type=int, default=3, help="restarts timed per size (median quoted)")
    parser.add_argument(
        "--baseline-ref",
        default=None,
        help="baseline commit (default: the commit before facts were journaled on this history)",
    )
    parser.add_argument("--phases", default="ingest,equality,state", help="comma-separated subset to run")
    args = parser.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.baseline_ref is None:
        args.baseline_ref = _before_facts()
    rows = _rows()
    phases = set(args.phases.split(","))
    load = os.getloadavg()[0]
    print(f"cpus {os.cpu_count()}; load average {load:.1f}; {len(rows)} distinct generated rows")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if "ingest" in phases:
            ingest_phase(args, rows, tmp)
        if "equality" in phases:
            equality_phase(args, rows, tmp)
        if "state" in phases:
            state_phase(args, rows, tmp)
    print(f"load average at the end {os.getloadavg()[0]:.1f} (other work on the machine slows every figure)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
