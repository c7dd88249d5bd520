"""The red team's shapes (issue 36): each hostile load against a control run, PASS/FAIL per target.

One command (``--quick``: small sizes, ~3 min on two shared cores; ``--only`` picks shapes)::

    .venv/bin/python benchmarks/red_team.py --quick
    .venv/bin/python benchmarks/red_team.py --only big-body,client-batches

The service is a real ``rollout-sidecar serve`` on 127.0.0.1 in its own process; the load comes
from other processes (``spawn``), bounded in count and time; a thread of this one polls
``/drain_margin`` every 5 ms on one keep-alive connection, and only the polls made while the
load was on the wire are counted (the clocks are ``CLOCK_MONOTONIC``, shared by the processes).
Memory is read from ``/proc`` (peak: ``VmHWM``, reset before the load). The shapes:

* ``big-body``: one body of 700k events (under the 64 MB body cap, 70x the 10,000-event cap):
  ``/drain_margin`` max <= 200 ms, peak RSS growth <= 300 MB, answered 413/422 naming the cap.
  Control: the same polls with the service idle.
* ``client-batches``: three clients post ``dispatcher_client``'s default 512-event batches of
  generated rows back to back: ``/drain_margin`` p99 <= 5 ms. Control: idle.
* ``invalid-rows``: 1-3 MB rows that fail the contract by one field (an unknown key or a
  negative duration in one model call), one a request: ``/drain_margin`` p99 <= 2x the
  control's, the same rows valid.
* ``report-readers``: a run of 100k rows, one client posting 16-event batches every 20 ms while
  two readers loop on ``/report`` and ``/report/verdicts``: ingest p99 <= 2x the control's
  (the same client, no readers).
* ``mlflow``, ``otlp``, ``wandb``: the exporter pointed at a loopback endpoint that answers
  every request with a 1.9 GB body (``huge``), never answers (``hang``), drips a status line
  (``drip``), answers 500 (``error``), or at a port nothing listens on (``down``); ``--quick``:
  ``huge`` and ``hang`` only. Per mode: peak RSS growth <= the control's (no exporter, the same
  steady ingest) + 100 MB, ``/drain_margin`` p99 <= 50 ms, SIGTERM to exit <= 5 s.
* ``follow-line``: ``rollout-sidecar follow`` of a run whose rollouts hold a 300 MB line between
  good rows: exits 0 (alive), every good row ingested, a ``record_unreadable`` finding, its peak
  RSS <= the control's (the same rows without the line) + 64 MB.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as a script from anywhere

from benchmarks.baseline import (  # noqa: E402
    MB,
    Poller,
    completed_event,
    connect,
    generated_rows,
    ms,
    polled,
    preload,
    quantile,
    request,
    reset_peak,
    service,
    start_run,
    verdict,
)
from tests.reliability_harness.proc_stats import peak_resident_bytes  # noqa: E402
from tests.reliability_harness.sidecar_process import free_port  # noqa: E402

EVENT_CAP = 10_000
FULL = {
    "big_events": 700_000,
    "batch_rounds": 20,
    "invalid_rows": 48,
    "reader_rows": 100_000,
    "phase_s": 15.0,
    "export_bytes": 1900 * MB,
    "export_s": 20.0,
    "export_modes": ("huge", "hang", "drip", "error", "down"),
    "line_bytes": 300 * MB,
}
QUICK = {
    "big_events": 100_000,
    "batch_rounds": 4,
    "invalid_rows": 12,
    "reader_rows": 10_000,
    "phase_s": 5.0,
    "export_bytes": 300 * MB,
    "export_s": 8.0,
    "export_modes": ("huge", "hang"),
    "line_bytes": 100 * MB,
}
Sizes = dict[str, Any]
Window = tuple[float, float]


# -- the load's side (each function runs in a process of its own) ---------------------------------


def big_body_load(url: str, run: str, events: int) -> tuple[int, str, int, Window]:
    """One ``POST`` of ``events`` latency events: (status, answer head, body bytes, its window)."""
    event = b'{"kind":"latency","op":"record","seconds":1.5,"source":"red-team","seq":%d}'
    body = b"[" + b",".join(event % i for i in range(events)) + b"]"
    conn = connect(url)
    began = time.perf_counter()
    status, answer = request(conn, "POST", f"/v1/runs/{run}/events", body)
    return status, answer[:400].decode("utf-8", "replace"), len(body), (began, time.perf_counter())


def batches_load(url: str, run: str, client: int, rounds: int, batch: int) -> tuple[list[float], int, Window]:
    """``rounds`` batches of ``batch`` completions back to back: (latencies, body bytes, window)."""
    pool = generated_rows(client, 64, calls=4, payload=1024)
    bodies = [
        orjson.dumps(
            [
                completed_event(pool[i % 64], (client * rounds + r) * batch + i, f"c{client}", r * batch + i)
                for i in range(batch)
            ]
        )
        for r in range(rounds)
    ]
    conn, latencies = connect(url), []
    began = time.perf_counter()
    for body in bodies:
        start = time.perf_counter()
        status, answer = request(conn, "POST", f"/v1/runs/{run}/events", body)
        assert status == 200, answer[:300]
        latencies.append(time.perf_counter() - start)
    return latencies, sum(map(len, bodies)) // len(bodies), (began, time.perf_counter())


def big_rows_load(
    url: str, run: str, count: int, invalid: bool, first_task: int
) -> tuple[list[float], list[int], Window]:
    """``count`` rows of 1-3 MB, one a request: (latencies, row sizes, window)."""
    rows = [
        row
        for row in generated_rows(3, count * 2, calls=200, payload=8000, invalid=invalid)
        if MB <= len(orjson.dumps(row)) <= 3 * MB
    ][:count]
    bodies = [
        orjson.dumps([completed_event(row, first_task + i, "rows", first_task + i)])
        for i, row in enumerate(rows)
    ]
    conn, latencies = connect(url), []
    began = time.perf_counter()
    for body in bodies:
        start = time.perf_counter()
        status, answer = request(conn, "POST", f"/v1/runs/{run}/events", body)
        assert status == 200, answer[:300]
        latencies.append(time.perf_counter() - start)
    return latencies, [len(body) for body in bodies], (began, time.perf_counter())


def steady_load(
    url: str, run: str, first_task: int, seconds: float, batch: int = 16, every: float = 0.02
) -> list[float]:
    """A ``batch``-event POST every ``every`` seconds for ``seconds``: each one's latency."""
    pool = generated_rows(11, 32, calls=2, payload=256)
    conn, latencies, task = connect(url), [], first_task
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        body = orjson.dumps(
            [completed_event(pool[i % 32], task + i, f"steady{first_task}", task + i) for i in range(batch)]
        )
        task += batch
        start = time.perf_counter()
        status, answer = request(conn, "POST", f"/v1/runs/{run}/events", body)
        assert status == 200, answer[:300]
        latencies.append(time.perf_counter() - start)
        time.sleep(max(0.0, every - (time.perf_counter() - start)))
    return latencies


def report_reader(url: str, run: str, seconds: float) -> int:
    """``/report`` and ``/report/verdicts`` of ``run`` back to back for ``seconds``: reads made."""
    conn, reads = connect(url), 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        for path in (f"/report?run_id={run}", f"/report/verdicts?run_id={run}"):
            status, _ = request(conn, "GET", path)
            reads += status == 200
    return reads


def hostile_endpoint(port: int, mode: str, body_bytes: int, seconds: float) -> None:
    """A loopback HTTP endpoint for ``seconds`` that, to every request, answers 200 with a
    ``body_bytes`` JSON body (``huge``), never answers (``hang``), sends a status line a byte
    every 100 ms (``drip``) or answers 500 (``error``)."""
    server = socket.create_server(("127.0.0.1", port))
    server.settimeout(0.5)
    deadline = time.monotonic() + seconds

    def answer(conn: socket.socket) -> None:
        with contextlib.suppress(OSError), conn:
            while time.monotonic() < deadline:
                head = b""
                while b"\r\n\r\n" not in head:
                    got = conn.recv(65536)
                    if not got:
                        return
                    head += got
                headers, _, rest = head.partition(b"\r\n\r\n")
                sizes = [
                    int(line.split(b":")[1])
                    for line in headers.lower().split(b"\r\n")
                    if b"content-length:" in line
                ]
                while len(rest) < sum(sizes):
                    rest += conn.recv(65536)
                if mode == "hang":
                    time.sleep(max(0.0, deadline - time.monotonic()))
                elif mode == "drip":
                    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Drip: ")
                    while time.monotonic() < deadline:
                        conn.sendall(b"x")
                        time.sleep(0.1)
                elif mode == "error":
                    conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 2\r\n\r\n{}")
                else:
                    conn.sendall(b'HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n{"a":"' % body_bytes)
                    for _ in range((body_bytes - 8) // MB):
                        conn.sendall(b"a" * MB)
                    conn.sendall(b"a" * ((body_bytes - 8) % MB) + b'"}')

    while time.monotonic() < deadline:
        with contextlib.suppress(TimeoutError):
            threading.Thread(target=answer, args=(server.accept()[0],), daemon=True).start()


# -- the shapes ----------------------------------------------------------------------------------


def idle(poller: Poller, seconds: float = 2.0) -> list[float]:
    began = time.perf_counter()
    time.sleep(seconds)
    return poller.within((began, time.perf_counter()))


def big_body(pool: ProcessPoolExecutor, workdir: Path, sizes: Sizes) -> bool:
    with polled(workdir, "big") as (sidecar, poller):
        assert sidecar.pid is not None
        control = idle(poller)
        before = reset_peak(sidecar.pid)
        status, answer, size, window = pool.submit(
            big_body_load, sidecar.url, "big", sizes["big_events"]
        ).result()
        growth = peak_resident_bytes(sidecar.pid) - before
        loaded = poller.within(window)
    print(
        f"  {sizes['big_events']:,} events, {size / MB:.1f} MB body: answered {status} "
        f"in {window[1] - window[0]:.2f} s: {answer[:160]}"
    )
    print(f"  /drain_margin idle {ms(control)}\n  /drain_margin during the body {ms(loaded)}")
    named = status in (413, 422) and any(cap in answer for cap in ("10000", "10,000", "10_000"))
    print(f"  {'PASS' if named else 'FAIL'}  answered 413 or 422 naming the {EVENT_CAP:,}-event cap")
    held = verdict("/drain_margin max", max(loaded, default=0.0) * 1e3, 200, " ms")
    return named & held & verdict("peak RSS growth", growth / MB, 300, " MB")


def client_batches(pool: ProcessPoolExecutor, workdir: Path, sizes: Sizes) -> bool:
    with polled(workdir, "batches") as (sidecar, poller):
        control = idle(poller)
        futures = [
            pool.submit(batches_load, sidecar.url, "batches", client, sizes["batch_rounds"], 512)
            for client in range(3)
        ]
        results = [future.result() for future in futures]
        window = (min(r[2][0] for r in results), max(r[2][1] for r in results))
        loaded = poller.within(window)
    rows = 3 * sizes["batch_rounds"] * 512
    posts = [latency for result in results for latency in result[0]]
    print(
        f"  3 clients x {sizes['batch_rounds']} batches of 512 rows ({results[0][1] / MB:.1f} MB a body): "
        f"{rows / (window[1] - window[0]):,.0f} rows/s, POST {ms(posts)}"
    )
    print(f"  /drain_margin idle {ms(control)}\n  /drain_margin loaded {ms(loaded)}")
    print(f"  ratio p99 loaded / idle: {quantile(loaded, 0.99) / quantile(control, 0.99):.1f}x")
    return verdict("/drain_margin p99 under the batches", quantile(loaded, 0.99) * 1e3, 5, " ms")


def invalid_rows(pool: ProcessPoolExecutor, workdir: Path, sizes: Sizes) -> bool:
    count = sizes["invalid_rows"]
    with polled(workdir, "rows") as (sidecar, poller):
        figures = {}
        for invalid in (False, True):
            latencies, lengths, window = pool.submit(
                big_rows_load, sidecar.url, "rows", count, invalid, 1000 * invalid
            ).result()
            figures[invalid] = poller.within(window)
            label = "invalid" if invalid else "valid (control)"
            print(
                f"  {len(lengths)} {label} rows of {min(lengths) / MB:.1f}-{max(lengths) / MB:.1f} MB: "
                f"POST {ms(latencies)}"
            )
            print(f"    /drain_margin {ms(figures[invalid])}")
    valid_p99, invalid_p99 = quantile(figures[False], 0.99), quantile(figures[True], 0.99)
    print(f"  ratio p99 invalid / valid: {invalid_p99 / valid_p99:.2f}x")
    return verdict("/drain_margin p99 with invalid rows", invalid_p99 * 1e3, 2 * valid_p99 * 1e3, " ms")


def report_readers(pool: ProcessPoolExecutor, workdir: Path, sizes: Sizes) -> bool:
    total, seconds = sizes["reader_rows"], sizes["phase_s"]
    with service(workdir, "readers") as sidecar:
        start_run(sidecar.url, "readers")
        began = time.perf_counter()
        half = total // 2
        for future in [pool.submit(preload, sidecar.url, "readers", first, half) for first in (0, half)]:
            future.result()
        print(f"  {total:,} rows loaded in {time.perf_counter() - began:.1f} s")
        control = pool.submit(steady_load, sidecar.url, "readers", 10_000_000, seconds).result()
        readers = [pool.submit(report_reader, sidecar.url, "readers", seconds + 1) for _ in range(2)]
        loaded = pool.submit(steady_load, sidecar.url, "readers", 20_000_000, seconds).result()
        reads = sum(future.result() for future in readers)
    print(f"  ingest, no readers (control): {ms(control)}")
    print(f"  ingest, 2 readers ({reads} reports read): {ms(loaded)}")
    print(f"  ratio p99 readers / none: {quantile(loaded, 0.99) / quantile(control, 0.99):.2f}x")
    return verdict(
        "ingest p99 with readers", quantile(loaded, 0.99) * 1e3, 2 * quantile(control, 0.99) * 1e3, " ms"
    )


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
        port = free_port()
        extra, env = exporter_args(exporter if mode != "control" else "", f"http://127.0.0.1:{port}", workdir)
        if mode not in ("control", "down"):
            pool.submit(hostile_endpoint, port, mode, sizes["export_bytes"], wait + 20)
            time.sleep(1.0)
        with polled(workdir, f"{exporter}-{mode}", *extra, every=0.02, env=env) as (sidecar, poller):
            assert sidecar.pid is not None
            before = reset_peak(sidecar.pid)
            began = time.perf_counter()
            ingest = pool.submit(steady_load, sidecar.url, f"{exporter}-{mode}", 0, wait).result()
            growth = (peak_resident_bytes(sidecar.pid) - before) / MB
            polls = poller.within((began, time.perf_counter()))
            alive = sidecar.poll() is None and poller.failures == 0
            stop_began = time.perf_counter()
        stopped = time.perf_counter() - stop_began
        print(
            f"  {mode}: peak RSS growth {growth:.0f} MB, alive {alive}, SIGTERM to exit {stopped:.2f} s\n"
            f"    POST {ms(ingest)}\n    /drain_margin {ms(polls)}"
        )
        if mode == "control":
            control_growth = growth
            continue
        held &= verdict(f"{mode}: peak RSS growth", growth, control_growth + 100, " MB")
        held &= verdict(f"{mode}: /drain_margin p99", quantile(polls, 0.99) * 1e3, 50, " ms")
        held &= verdict(f"{mode}: SIGTERM to exit", stopped, 5, " s")
    return held


def follow_line(pool: ProcessPoolExecutor, workdir: Path, sizes: Sizes) -> bool:
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
            follower = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "sidecar.cli",
                    "follow",
                    str(run_dir),
                    "--sidecar",
                    sidecar.url,
                    "--until-idle",
                    "2",
                    "--give-up-after",
                    "30",
                ],
                cwd=ROOT,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            code, peak, output = _wait_with_rusage(follower, 120.0 + line_bytes / (2 * MB))
            served = (peak_resident_bytes(sidecar.pid) - before) / MB
            _, summary = request(
                connect(sidecar.url), "GET", f"/report/quality_summary.json?run_id={run_dir.name}"
            )
        peaks[name] = peak
        run = orjson.loads(summary)["run"] if summary.startswith(b"{") else {}
        records, unreadable = (
            run.get("artifacts", {}).get("records"),
            run.get("issues", {}).get("record_unreadable"),
        )
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


def _check(name: str, held: bool) -> bool:
    print(f"  {'PASS' if held else 'FAIL'}  {name}")
    return held


def _wait_with_rusage(child: subprocess.Popen[bytes], timeout: float) -> tuple[int, float, str]:
    """Wait for ``child`` (SIGKILL after ``timeout``): its exit code, peak RSS in MB, output."""
    assert child.stdout is not None
    output: list[bytes] = []
    reader = threading.Thread(
        target=lambda: output.append(child.stdout.read() if child.stdout else b""), daemon=True
    )
    reader.start()
    deadline = time.monotonic() + timeout
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)
        if pid:
            child.returncode = os.waitstatus_to_exitcode(status)
            reader.join(5)
            return child.returncode, usage.ru_maxrss / 1024, b"".join(output).decode("utf-8", "replace")
        if time.monotonic() > deadline:
            child.kill()
        time.sleep(0.05)


SHAPES: dict[str, Callable[[ProcessPoolExecutor, Path, Sizes], bool]] = {
    "big-body": big_body,
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
    sizes = QUICK if args.quick else FULL
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
