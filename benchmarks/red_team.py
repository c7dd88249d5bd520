"""The red team's shapes (issue 36): each hostile load against a control run, PASS/FAIL per target.

``--quick``: small sizes; ``--only``: some shapes. The shapes, their targets and the method are in
benchmarks/README.md and docs/reliability.md. The service is a real ``serve`` in its own process,
loaded from ``spawn`` workers, its ``/drain_margin`` polled from a thread of this one.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import itertools
import multiprocessing
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from benchmarks.baseline import (  # noqa: E402
    MB,
    completed_event,
    connect,
    generated_rows,
    ms,
    polled,
    quantile,
    request,
    reset_peak,
    service,
    verdict,
)
from tests.reliability_harness.proc_stats import peak_resident_bytes  # noqa: E402
from tests.reliability_harness.sidecar_process import free_port  # noqa: E402
from tests.sidecar.export.trackers.hostile import HostileEndpoint  # noqa: E402

EVENT_CAP = 10_000
SIZES = {  # name: (full, --quick)
    "big_events": (700_000, 100_000),
    "batch_rounds": (20, 4),
    "invalid_rows": (48, 12),
    "reader_rows": (100_000, 10_000),
    "phase_s": (15.0, 5.0),
    "export_bytes": (1900 * MB, 300 * MB),
    "export_s": (20.0, 8.0),
    "export_modes": (("huge", "hang", "drip", "500", "down"), ("huge", "hang")),
    "line_bytes": (300 * MB, 100 * MB),
}
Sizes = dict[str, Any]
Window = tuple[float, float]
Request = tuple[str, str, bytes | None]


# -- the requests of each load (built in the load's own process) ---------------------------------


def _posts(run: str, bodies: list[bytes]) -> list[Request]:
    return [("POST", f"/v1/runs/{run}/events", body) for body in bodies]


def big_body(run: str, events: int) -> list[Request]:
    """One body of ``events`` latency events."""
    event = b'{"kind":"latency","op":"record","seconds":1.5,"source":"red-team","seq":%d}'
    return _posts(run, [b"[" + b",".join(event % i for i in range(events)) + b"]"])


def completions(
    run: str, first: int, count: int, batch: int, seed: int, calls: int, payload: int, invalid: bool = False
) -> list[Request]:
    """``count`` completions of new tasks from ``first``, ``batch`` events a body, cycling generated
    rows of ``calls`` model calls (``invalid``: each fails the contract by one field). Rows of
    over 200 calls are kept only if 1-3 MB encoded."""
    rows = generated_rows(
        seed, 2 * count if calls >= 200 else 64, calls=calls, payload=payload, invalid=invalid
    )
    if calls >= 200:
        rows = [row for row in rows if MB <= len(orjson.dumps(row)) <= 3 * MB]
    source = f"s{seed}-{first}"
    events = [completed_event(rows[i % len(rows)], first + i, source, first + i) for i in range(count)]
    return _posts(run, [orjson.dumps(events[i : i + batch]) for i in range(0, count, batch)])


def readers(run: str) -> list[Request]:
    """The two reports of ``run`` (read in a loop)."""
    return [("GET", f"/report?run_id={run}", None), ("GET", f"/report/verdicts?run_id={run}", None)]


class Drive(NamedTuple):
    latencies: list[float]
    statuses: list[int]
    sizes: list[int]
    last_answer: str
    window: Window


def drive(
    url: str,
    run: str,
    make: Callable[..., list[Request]],
    args: tuple[Any, ...],
    every: float = 0.0,
    seconds: float = 0.0,
    strict: bool = True,
) -> Drive:
    """Send ``make(run, *args)``'s requests on one connection, one every ``every`` s; with
    ``seconds``, over and over until then. ``strict``: every answer must be 200."""
    requests = make(run, *args)
    conn, out = connect(url), Drive([], [], [], "", (0.0, 0.0))
    began = time.perf_counter()
    for method, path, body in itertools.cycle(requests) if seconds else requests:
        start = time.perf_counter()
        if seconds and start - began >= seconds:
            break
        status, answer = request(conn, method, path, body)
        assert status == 200 or not strict, answer[:300]
        out.latencies.append(time.perf_counter() - start)
        out.statuses.append(status)
        out.sizes.append(len(body or b""))
        out = out._replace(last_answer=answer[:400].decode("utf-8", "replace"))
        time.sleep(max(0.0, every - (time.perf_counter() - start)))
    return out._replace(window=(began, time.perf_counter()))


Load = tuple[Callable[..., list[Request]], tuple[Any, ...], dict[str, Any]]


def steady(first: int, seconds: float) -> Load:
    """A 16-event body of new small rollouts every 20 ms for ``seconds`` (ingest as it runs)."""
    return (
        completions,
        (first, 16 * (int(seconds / 0.02) + 1), 16, 11, 2, 256),
        {"every": 0.02, "seconds": seconds},
    )


class Phase(NamedTuple):
    polls: list[float]
    """``/drain_margin`` latencies polled while this phase's requests were on the wire."""
    loads: list[Drive]
    growth: float
    """Peak RSS growth of the service during the phase, MB."""


def phases(
    pool: ProcessPoolExecutor,
    workdir: Path,
    run: str,
    plan: dict[str, list[Load]],
    *serve: str,
    env: dict[str, str] | None = None,
    every: float = 0.005,
) -> tuple[dict[str, Phase], bool, float]:
    """The harness: ``serve`` with ``run`` started and polled, then each phase of ``plan`` in turn,
    its loads at once from the pool (no load: 2 s idle). Returns the phases, whether the service
    stayed up answering every poll, and its SIGTERM to exit in seconds."""
    done: dict[str, Phase] = {}
    with polled(workdir, run, *serve, every=every, env=env) as (sidecar, poller):
        assert sidecar.pid is not None
        for name, loads in plan.items():
            before = reset_peak(sidecar.pid)
            began = time.perf_counter()
            futures = [pool.submit(drive, sidecar.url, run, make, args, **kw) for make, args, kw in loads]
            results = [future.result() for future in futures]
            if not results:
                time.sleep(2.0)
            starts, ends = [r.window[0] for r in results], [r.window[1] for r in results]
            window = (min(starts, default=began), max(ends, default=time.perf_counter()))
            growth = (peak_resident_bytes(sidecar.pid) - before) / MB
            done[name] = Phase(poller.within(window), results, growth)
        alive = sidecar.poll() is None and poller.failures == 0
        stop_began = time.perf_counter()
    return done, alive, time.perf_counter() - stop_began


def _p99_ms(values: list[float]) -> float:
    return quantile(values, 0.99) * 1e3


def _check(name: str, held: bool) -> bool:
    print(f"  {'PASS' if held else 'FAIL'}  {name}")
    return held


# -- the shapes ----------------------------------------------------------------------------------


def big_body_shape(pool: ProcessPoolExecutor, workdir: Path, sizes: Sizes) -> bool:
    plan: dict[str, list[Load]] = {
        "idle": [],
        "body": [(big_body, (sizes["big_events"],), {"strict": False})],
    }
    done, _, _ = phases(pool, workdir, "big", plan)
    idle, body = done["idle"], done["body"]
    sent = body.loads[0]
    took = sent.window[1] - sent.window[0]
    print(
        f"  {sizes['big_events']:,} events, {sent.sizes[0] / MB:.1f} MB body: answered {sent.statuses[0]} "
        f"in {took:.2f} s: {sent.last_answer[:160]}"
    )
    print(f"  /drain_margin idle {ms(idle.polls)}\n  /drain_margin during the body {ms(body.polls)}")
    named = sent.statuses[0] in (413, 422) and any(
        c in sent.last_answer for c in ("10000", "10,000", "10_000")
    )
    held = _check(f"answered 413 or 422 naming the {EVENT_CAP:,}-event cap", named)
    held &= verdict("/drain_margin max", max(body.polls, default=0.0) * 1e3, 200, " ms")
    return held & verdict("peak RSS growth", body.growth, 300, " MB")


def client_batches(pool: ProcessPoolExecutor, workdir: Path, sizes: Sizes) -> bool:
    rounds = sizes["batch_rounds"]
    plan: dict[str, list[Load]] = {
        "idle": [],
        "batches": [(completions, (c * rounds * 512, rounds * 512, 512, c, 4, 1024), {}) for c in range(3)],
    }
    done, _, _ = phases(pool, workdir, "batches", plan)
    idle, loaded = done["idle"], done["batches"]
    span = max(d.window[1] for d in loaded.loads) - min(d.window[0] for d in loaded.loads)
    posts = [latency for d in loaded.loads for latency in d.latencies]
    print(
        f"  3 clients x {rounds} batches of 512 rows ({loaded.loads[0].sizes[0] / MB:.1f} MB a body): "
        f"{3 * rounds * 512 / span:,.0f} rows/s, POST {ms(posts)}"
    )
    print(f"  /drain_margin idle {ms(idle.polls)}\n  /drain_margin loaded {ms(loaded.polls)}")
    print(f"  ratio p99 loaded / idle: {_p99_ms(loaded.polls) / _p99_ms(idle.polls):.1f}x")
    return verdict("/drain_margin p99 under the batches", _p99_ms(loaded.polls), 5, " ms")


def invalid_rows(pool: ProcessPoolExecutor, workdir: Path, sizes: Sizes) -> bool:
    count = sizes["invalid_rows"]
    plan: dict[str, list[Load]] = {
        "valid (control)": [(completions, (0, count, 1, 3, 200, 8000, False), {})],
        "invalid": [(completions, (1000, count, 1, 3, 200, 8000, True), {})],
    }
    done, _, _ = phases(pool, workdir, "rows", plan)
    for label, phase in done.items():
        lengths = phase.loads[0].sizes
        print(
            f"  {len(lengths)} {label} rows of {min(lengths) / MB:.1f}-{max(lengths) / MB:.1f} MB: "
            f"POST {ms(phase.loads[0].latencies)}\n    /drain_margin {ms(phase.polls)}"
        )
    valid, invalid = _p99_ms(done["valid (control)"].polls), _p99_ms(done["invalid"].polls)
    print(f"  ratio p99 invalid / valid: {invalid / valid:.2f}x")
    return verdict("/drain_margin p99 with invalid rows", invalid, 2 * valid, " ms")


def report_readers(pool: ProcessPoolExecutor, workdir: Path, sizes: Sizes) -> bool:
    total, seconds = sizes["reader_rows"], sizes["phase_s"]
    reader: Load = (readers, (), {"seconds": seconds + 1})
    plan: dict[str, list[Load]] = {
        "preload": [(completions, (first, total // 2, 500, first, 2, 256), {}) for first in (0, total // 2)],
        "control": [steady(10_000_000, seconds)],
        "readers": [steady(20_000_000, seconds), reader, reader],
    }
    done, _, _ = phases(pool, workdir, "readers", plan, every=1.0)  # few polls: ingest is measured
    control, read = done["control"].loads[0].latencies, done["readers"].loads[0].latencies
    took = max(d.window[1] for d in done["preload"].loads) - min(d.window[0] for d in done["preload"].loads)
    print(f"  {total:,} rows loaded in {took:.1f} s")
    reads = sum(len(d.latencies) for d in done["readers"].loads[1:])
    print(f"  ingest, no readers (control): {ms(control)}")
    print(f"  ingest, 2 readers ({reads} reports read): {ms(read)}")
    print(f"  ratio p99 readers / none: {_p99_ms(read) / _p99_ms(control):.2f}x")
    return verdict("ingest p99 with readers", _p99_ms(read), 2 * _p99_ms(control), " ms")


def exporter_args(exporter: str, url: str, workdir: Path) -> tuple[list[str], dict[str, str]]:
    """``serve``'s options and environment to export to ``url`` often (a step every 0.5 s)."""
    env = {"MLFLOW_DISABLE_TELEMETRY": "true", "WANDB_SILENT": "true", "WANDB_DIR": str(workdir)}
    if exporter == "otlp":
        env |= {"OTEL_METRIC_EXPORT_INTERVAL": "500", "OTEL_EXPORTER_OTLP_TIMEOUT": "2"}
        return ["--otlp-endpoint", url], env
    if exporter == "mlflow":
        return ["--mlflow-tracking-uri", url, "--tracker-interval", "0.5"], env
    if exporter == "wandb":
        env |= {"WANDB_MODE": "online", "WANDB_BASE_URL": url, "WANDB_API_KEY": "x" * 40}
        return ["--wandb-project", "red-team", "--tracker-interval", "0.5"], env
    return [], env


def hostile_exporter(exporter: str, pool: ProcessPoolExecutor, workdir: Path, sizes: Sizes) -> bool:
    """``exporter`` pointed at a hostile endpoint, once per mode (``down``: nothing listens),
    against a control run without it, the same steady ingest in each."""
    wait, held, control_growth = sizes["export_s"], True, 0.0
    for mode in ("control", *sizes["export_modes"]):
        endpoint: contextlib.AbstractContextManager[str]
        if mode in ("control", "down"):
            endpoint = contextlib.nullcontext(f"http://127.0.0.1:{free_port()}")  # nothing listens there
        else:
            endpoint = HostileEndpoint(mode, huge_bytes=sizes["export_bytes"])
        with endpoint as url:
            serve, env = exporter_args(exporter if mode != "control" else "", url, workdir)
            plan = {"ingest": [steady(0, wait)]}
            done, alive, stopped = phases(
                pool, workdir, f"{exporter}-{mode}", plan, *serve, env=env, every=0.02
            )
        phase = done["ingest"]
        print(
            f"  {mode}: peak RSS growth {phase.growth:.0f} MB, alive {alive}, "
            f"SIGTERM to exit {stopped:.2f} s\n"
            f"    POST {ms(phase.loads[0].latencies)}\n    /drain_margin {ms(phase.polls)}"
        )
        if mode == "control":
            control_growth = phase.growth
            continue
        held &= verdict(f"{mode}: peak RSS growth", phase.growth, control_growth + 100, " MB")
        held &= verdict(f"{mode}: /drain_margin p99", _p99_ms(phase.polls), 50, " ms")
        held &= verdict(f"{mode}: SIGTERM to exit", stopped, 5, " s")
    return held


def follow_line(pool: ProcessPoolExecutor, workdir: Path, sizes: Sizes) -> bool:
    """``follow`` of a run with a huge line between good rows, against the same rows without it."""
    good = [orjson.dumps(row) + b"\n" for row in generated_rows(5, 20, calls=2, payload=256)]
    peaks: dict[str, float] = {}
    held = True
    for name, line_bytes in (("control", 0), ("line", sizes["line_bytes"])):
        run_dir = workdir / f"follow-{name}"
        run_dir.mkdir()
        with (run_dir / "rollouts.jsonl").open("wb") as out:
            out.writelines(good[:10])
            if line_bytes:
                out.write(
                    b'{"_ng_task_index":100,"_ng_rollout_index":0,"reward":0.0,"response":{"output":'
                    b'[{"type":"message","content":[{"type":"output_text","text":"'
                )
                for _ in range(line_bytes // MB):
                    out.write(b"x" * MB)
                out.write(b'"}]}]}}\n')
            out.writelines(good[10:])
        with service(workdir, f"follow-{name}") as sidecar:
            assert sidecar.pid is not None
            before = reset_peak(sidecar.pid)
            follow = (
                f"-m sidecar.cli follow {run_dir} --sidecar {sidecar.url} --until-idle 2 --give-up-after 30"
            )
            limit = 120.0 + line_bytes / (2 * MB)
            follower = subprocess.Popen(
                [sys.executable, *follow.split()],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            killer = threading.Timer(limit, follower.kill)
            killer.start()
            assert follower.stdout is not None
            output = follower.stdout.read().decode("utf-8", "replace")
            _, status, usage = os.wait4(follower.pid, 0)  # this child's own peak RSS, KiB
            killer.cancel()
            follower.returncode = code = os.waitstatus_to_exitcode(status)
            peak = usage.ru_maxrss / 1024
            served = (peak_resident_bytes(sidecar.pid) - before) / MB
            path = f"/report/quality_summary.json?run_id={run_dir.name}"
            _, summary = request(connect(sidecar.url), "GET", path)
        peaks[name] = peak
        run = orjson.loads(summary)["run"] if summary.startswith(b"{") else {}
        records = run.get("artifacts", {}).get("records")
        unreadable = run.get("issues", {}).get("record_unreadable")
        print(
            f"  {name}: follower exit {code}, peak RSS {peak:.0f} MB; service RSS growth {served:.0f} MB; "
            f"records {records}, record_unreadable {unreadable}"
        )
        if code != 0:
            print(f"    follower said: {output[-600:]}")
        if line_bytes:
            held &= _check(f"follower alive past a {line_bytes / MB:.0f} MB line (exit 0)", code == 0)
            held &= _check("the line skipped with a record_unreadable finding", bool(unreadable))
            held &= _check("every good row ingested", (records or 0) - (unreadable or 0) >= len(good))
            held &= verdict("service peak RSS growth", served, 64, " MB")
    return held & verdict("follower peak RSS", peaks["line"], peaks["control"] + 64, " MB")


SHAPES: dict[str, Callable[[ProcessPoolExecutor, Path, Sizes], bool]] = {
    "big-body": big_body_shape,
    "client-batches": client_batches,
    "invalid-rows": invalid_rows,
    "report-readers": report_readers,
    "mlflow": functools.partial(hostile_exporter, "mlflow"),
    "otlp": functools.partial(hostile_exporter, "otlp"),
    "wandb": functools.partial(hostile_exporter, "wandb"),
    "follow-line": follow_line,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument(
        "--only", default=",".join(SHAPES), help=f"comma-separated shapes of {', '.join(SHAPES)}"
    )
    args = parser.parse_args(argv)
    chosen = [name for name in args.only.split(",") if name]
    unknown = sorted(set(chosen) - set(SHAPES))
    if unknown:
        parser.error(f"unknown shape(s): {', '.join(unknown)}")
    sizes = {name: pair[args.quick] for name, pair in SIZES.items()}
    print(f"load average {os.getloadavg()[0]:.1f}; sizes {'quick' if args.quick else 'full'}")
    results: dict[str, bool] = {}
    with (
        tempfile.TemporaryDirectory(prefix="red-team-") as tmp,
        ProcessPoolExecutor(8, mp_context=multiprocessing.get_context("spawn")) as pool,
    ):
        list(pool.map(time.sleep, [0.5] * 8))  # every worker started before any load is timed
        for name in chosen:
            print(f"== {name}")
            began = time.perf_counter()
            workdir = Path(tmp) / name
            workdir.mkdir()
            try:
                results[name] = SHAPES[name](pool, workdir, sizes)
            except Exception as error:  # one shape's breakage must not hide the others' figures
                print(f"  FAIL  {type(error).__name__}: {str(error)[:500]}")
                results[name] = False
            print(f"  ({time.perf_counter() - began:.0f} s)")
    print("\n".join(f"{'PASS' if held else 'FAIL'}  {name}" for name, held in results.items()))
    return 0 if all(results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
