"""Where a live row's CPU goes, stage by stage, and the service's CPU per row against a baseline.

One command::

    .venv/bin/python benchmarks/live_profile.py                       # stages, then the servers
    .venv/bin/python benchmarks/live_profile.py --phases stages       # in-process stages only
    .venv/bin/python benchmarks/live_profile.py --baseline-ref main --repeats 3

**Stages** (in this process, CPU time of all threads, µs per row, median of ``--repeats``,
stages interleaved): requests of ``--batch`` ``completed`` events of generated ~12.5 KiB rows
(``benchmarks/ingest.py``'s shape) go through each stage of ``POST /v1/runs/{run}/events`` on
two paths side by side: the *full path* (the whole body parsed by orjson, every row a dict:
what every request took before rows were kept as bytes, and what a body the raw path cannot
vouch for still takes) and the *raw path* (``sidecar.ingest.raw_rows``: the body vetted by simdjson,
decoded once by msgspec with each row left as its bytes; digest and ``ng_perf`` from the batch
check's fast path).

**Servers** (``--phases servers``): ``rollout-sidecar serve`` of this build and of a baseline
build (``--baseline-ref``, default ``main``, unpacked with ``git archive``), interleaved,
``--repeats`` rounds each, durable acks over loopback: (a) ~12.5 KiB rows, 8 clients, 16 rows a
request: the service process's CPU per row; (b) ``benchmarks/ingest.py``'s 8.8 KiB rows, 32
clients, 16 rows a request: rows/s; (c) rows without a trajectory (``{"reward": 1.0}``), 8
clients: the per-row floor outside the row's bytes. Medians, with this build's ratio to the
baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.ingest import Bench  # noqa: E402
from benchmarks.state import serve, unpack_baseline  # noqa: E402
from sidecar.demo.synthetic import SyntheticConfig, generate_rows  # noqa: E402
from sidecar.http.json_bodies import too_deep  # noqa: E402
from sidecar.ingest.engines import default_engines  # noqa: E402
from sidecar.ingest.events import (  # noqa: E402
    Completed,
    EventBatch,
    RunStarted,
    content_hash,
    dump_row,
    idempotency_key,
)
from sidecar.ingest.facts import derive_fact, latency_ms  # noqa: E402
from sidecar.ingest.raw_rows import decode_request, vetted_json  # noqa: E402
from sidecar.journal import (  # noqa: E402
    Journal,
    JournalEvent,
    encode_fact,
)
from sidecar.state.run import RunState  # noqa: E402
from tests.reliability_harness.proc_stats import cpu_seconds  # noqa: E402

__all__ = ["BARE_ROWS", "generated_rows", "ingest_round"]  # what other benchmarks import

MAX_JSON_DEPTH = 1024  # the service's default --max-json-depth
SOURCE_PATH = "rollouts.jsonl"
SETTINGS = (SOURCE_PATH, frozenset[str]())


def generated_rows(payload_bytes: int) -> list[dict[str, Any]]:
    """400 generated rows: 2 model calls of ``payload_bytes`` each (2100: ~12.5 KiB, 1200: 8.8 KiB)."""
    config = SyntheticConfig(
        num_tasks=400, repeats_per_task=1, model_calls_per_rollout=2, payload_bytes_per_call=payload_bytes
    )
    return list(generate_rows(config, 1))


#: ``{"reward": 1.0}`` (plus its identity): the per-row floor of everything but the row's own bytes.
BARE_ROWS: list[dict[str, Any]] = [{"reward": 1.0}]


def make_bodies(count: int, batch: int, payload_bytes: int) -> list[bytes]:
    """``count`` rows as request bodies of ``batch`` events, identities made unique."""
    rows = generated_rows(payload_bytes)
    bodies = []
    for start in range(0, count, batch):
        events = []
        for index in range(start, start + batch):
            row = dict(rows[index % len(rows)])
            row["_ng_task_index"] = index
            row["_ng_rollout_index"] = 0
            events.append({"kind": "completed", "seconds": 1.0 + index % 600, "row": row})
        bodies.append(orjson.dumps(events))
    return bodies


def _timed(step: Callable[[], object]) -> float:
    # each stage starts from a collected heap whose survivors (the prepared inputs of every stage)
    # the collector no longer scans: what a stage allocates is what its collections cost
    gc.collect()
    gc.freeze()
    try:
        started = time.process_time()
        step()
        return time.process_time() - started
    finally:
        gc.unfreeze()


class _Path:
    """One ingest path's inputs, prepared once so that each stage can be timed alone."""

    def __init__(self, bodies: list[bytes], raw: bool) -> None:
        self.bodies = bodies
        self.raw = raw
        self.engines = default_engines()
        self.decoded: list[Any] = [self.decode(body) for body in bodies]
        self.events = [event for request in self.decoded for event in EventBatch.validate_python(request)]
        self.flat: list[Completed] = [event for event in self.events if isinstance(event, Completed)]
        self.now = time.time()
        self.facts = [self.derive(event) for event in self.flat]
        # the follower's raw lines: parsed and validated in full, or read by the fast path
        self.line_engines = self.engines if raw else dataclasses.replace(self.engines, digest_everyday=None)
        self.line_texts = [dump_row(event.row).decode() for event in self.flat if event.row is not None]

    def fresh(self) -> list[Completed]:
        """The completions decoded and validated anew: nothing worked out once is cached yet."""
        events = [event for body in self.bodies for event in EventBatch.validate_python(self.decode(body))]
        return [event for event in events if isinstance(event, Completed)]

    def fresh_lines(self) -> list[Completed]:
        return [
            Completed(kind="completed", line=text, line_number=number, seconds=1.0)
            for number, text in enumerate(self.line_texts, start=1)
        ]

    def decode(self, body: bytes) -> Any:
        if self.raw:
            return decode_request(body, MAX_JSON_DEPTH)
        too_deep(body, MAX_JSON_DEPTH)
        return orjson.loads(body)

    def derive(self, event: Completed) -> Any:
        return derive_fact(event, received_at=self.now, engines=self.engines, settings=SETTINGS)

    def stages(self) -> dict[str, Callable[[], object]]:
        flat, bodies = self.flat, self.bodies
        row_bytes = [dump_row(event.row) for event in flat if event.row is not None]
        engines = self.engines
        stages: dict[str, Callable[[], object]] = {
            "body check (depth / simdjson vetting)": (
                (lambda: [vetted_json(body, MAX_JSON_DEPTH) for body in bodies])
                if self.raw
                else (lambda: [too_deep(body, MAX_JSON_DEPTH) for body in bodies])
            ),
            "request decode (check + parse, once)": lambda: [self.decode(body) for body in bodies],
            "event model validation (pydantic)": lambda: [
                EventBatch.validate_python(r) for r in self.decoded
            ],
            "row re-serialization (dump_row)": lambda: [dump_row(event.row) for event in flat if event.row],
            "content hash (of the row bytes)": lambda: [content_hash(data) for data in row_bytes],
        }
        keyed = self.fresh()
        for event in keyed:  # as served: the fact first (its fast path reads the identity keys)
            self.derive(event)
        stages["idempotency key (after the fact, as served)"] = lambda: [
            idempotency_key("run", event) for event in keyed
        ]
        if self.raw:
            stages["digest + ng_perf (fast path, from bytes)"] = lambda: [
                engines.digest_everyday
                and engines.digest_everyday(
                    dump_row(event.row),
                    latency_ms(event),
                    source_path=SOURCE_PATH,
                    source_index=0,
                    line_number=0,
                    ordinal=0,
                    ignored_checks=SETTINGS[1],
                )
                for event in flat
                if event.row is not None
            ]
        else:
            stages["ng_perf (incl. trajectory validation)"] = lambda: [
                engines.build_ng_perf(event.parsed[0] or {}, latency_ms(event)) for event in flat
            ]
            stages["digest (incl. trajectory validation)"] = lambda: [
                engines.digest_record(event.parsed[0], source_path=SOURCE_PATH, ignored_checks=SETTINGS[1])
                for event in flat
            ]
        derived = self.fresh()
        stages["derive fact (digest + ng_perf + identity)"] = lambda: [
            self.derive(event) for event in derived
        ]
        lines = self.fresh_lines()
        stages["follower line: derive fact (`line` event, /lines)"] = lambda: [
            derive_fact(line, received_at=self.now, engines=self.line_engines, settings=SETTINGS)
            for line in lines
        ]
        stages["fact encoding (msgpack)"] = lambda: [encode_fact(fact) for fact in self.facts]
        return stages


def profile(bodies: list[bytes], batch: int, repeats: int) -> dict[str, dict[str, list[float]]]:
    """CPU seconds per row of each stage on each path, one entry per repeat."""
    paths = {"full path": _Path(bodies, raw=False), "raw path": _Path(bodies, raw=True)}
    timings: dict[str, dict[str, list[float]]] = {name: {} for name in paths}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(repeats):
            for name, path in paths.items():
                count = len(path.flat)
                for stage, step in path.stages().items():
                    timings[name].setdefault(stage, []).append(_timed(step) / count)
                journal = Path(tmp) / f"j{repeat}-{name[:3]}.sqlite3"
                timings[name].setdefault("journal write (SQLite, one append per request)", []).append(
                    _journal_seconds(journal, path.facts, batch) / count
                )
                state = RunState(
                    "run", RunStarted(kind="run_started"), received_at=path.now, engines=path.engines
                )
                timings[name].setdefault("state apply (RunState.apply_fact)", []).append(
                    _timed(lambda state=state, path=path: [state.apply_fact(fact) for fact in path.facts])
                    / count
                )
    return timings


def _journal_seconds(path: Path, facts: list[Any], batch: int) -> float:
    """CPU seconds (all threads) of appending ``facts`` as one durable append per request."""
    records = [
        JournalEvent(run_id="run", kind="completed", key=f"run|{index}", payload=encode_fact(fact))
        for index, fact in enumerate(facts)
    ]

    async def run() -> float:
        journal = Journal(path)
        await journal.open()
        started = time.process_time()
        for start in range(0, len(records), batch):
            await journal.append(records[start : start + batch])
        spent = time.process_time() - started
        await journal.close()
        return spent

    return asyncio.run(run())


def print_stages(timings: dict[str, dict[str, list[float]]], header: str) -> None:
    full, raw = timings["full path"], timings["raw path"]
    print(header)
    print(f"  {'stage':50s} {'full path':>10s} {'raw path':>10s}")
    for stage in dict.fromkeys([*full, *raw]):
        cells = [
            f"{statistics.median(t[stage]) * 1e6:10.1f}" if stage in t else f"{'-':>10s}" for t in (full, raw)
        ]
        print(f"  {stage:50s} {cells[0]} {cells[1]}")


# -- the real service ---------------------------------------------------------------------------


async def ingest_round(
    url: str, pid: int, rows: list[dict[str, Any]], count: int, clients: int, batch: int
) -> tuple[float, float]:
    """(rows/s, service CPU seconds per row) of one durable ingest round."""
    bench = Bench(int(url.rsplit(":", 1)[1]), rows)
    await bench.start_run("live")

    async def post(client: Any) -> None:
        status, reply = await client.request("POST", "/v1/runs/live/events", bench.body("live", batch))
        assert status == 200, reply[:200]

    before = cpu_seconds(pid)[0]
    elapsed = await bench.closed_loop(clients, count // batch, post)
    spent = cpu_seconds(pid)[0] - before
    done = count // batch * batch
    return done / elapsed, spent / done


def servers(args: argparse.Namespace, tmp: Path) -> None:
    builds: dict[str, Path | None] = {
        f"baseline {args.baseline_ref}": unpack_baseline(args.baseline_ref, tmp / "baseline"),
        "this build": None,
    }
    scenarios = {
        "12.5 KiB rows, 8 clients x 16 rows": (generated_rows(2100), 8),
        "8.8 KiB rows, 32 clients x 16 rows": (generated_rows(1200), 32),
        "rows without a trajectory, 8 clients x 16 rows": (BARE_ROWS, 8),
    }
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for repeat in range(args.repeats):  # interleaved: both builds see the same machine
        for build, code in builds.items():
            for scenario, (rows, clients) in scenarios.items():
                journal = tmp / f"s{repeat}-{build.split()[0]}-{clients}" / "journal.sqlite3"
                with serve(journal, code=code) as (url, pid):
                    outcome = asyncio.run(ingest_round(url, pid, rows, args.server_rows, clients, 16))
                results.setdefault((build, scenario), []).append(outcome)
    for scenario in scenarios:
        print(f"\n## {scenario}, durable acks, {args.server_rows:,} rows, median of {args.repeats}")
        base = None
        for build in builds:
            rounds = results[(build, scenario)]
            rate = statistics.median(r[0] for r in rounds)
            cpu = statistics.median(r[1] for r in rounds)
            base = base or (rate, cpu)
            print(
                f"  {build:>22}: {rate:7,.0f} rows/s ({', '.join(f'{r[0]:,.0f}' for r in rounds)}), "
                f"ratio {rate / base[0]:.2f}; service CPU {cpu * 1e6:5.0f} µs/row "
                f"({', '.join(f'{r[1] * 1e6:.0f}' for r in rounds)}), {base[1] / cpu:.2f}x less"
            )
    print("  [targets: <= 150 µs/row at 12.5 KiB x 8 clients; >= 5,000 rows/s at 8.8 KiB x 32 clients]")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phases", default="stages,servers", help="comma-separated: stages, servers")
    parser.add_argument("--rows", type=int, default=2048, help="rows per stage run")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--payload-bytes", type=int, default=2100, help="per model call (2100: ~12.5 KiB)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--server-rows", type=int, default=6000, help="rows per server round")
    parser.add_argument("--baseline-ref", default="main", help="the baseline build's commit")
    args = parser.parse_args()
    phases = set(args.phases.split(","))
    if "stages" in phases:
        bodies = make_bodies(args.rows, args.batch, args.payload_bytes)
        size = sum(map(len, bodies)) / args.rows
        print_stages(
            profile(bodies, args.batch, args.repeats),
            f"## stages: {args.rows} rows of {size / 1024:.1f} KiB, {args.batch} per request, "
            f"CPU µs per row, median of {args.repeats}",
        )
    if "servers" in phases:
        with tempfile.TemporaryDirectory() as tmp:
            servers(args, Path(tmp))


if __name__ == "__main__":
    main()
