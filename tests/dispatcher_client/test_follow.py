"""The follower over files another process writes: its report equals ``health-check`` of the final file."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from dispatcher_client import ClientConfig, RemoteLatencyTracker
from dispatcher_client.follow import Follower, FollowerError, follow_paths
from sidecar.cli import main as cli_main
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from sidecar.perf import DispatchLatencyTracker, build_ng_perf, compute_perf_summary
from tests.reliability_harness.file_writer import writer_argv
from tests.sidecar.service_support import generate_run

from .support import REPO_ROOT, SidecarProcess, batch_files, free_port, sidecar_files

pytestmark = pytest.mark.timeout(60)


def _append(path: Path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


def _lines(seed: int, num_tasks: int) -> tuple[list[bytes], list[bytes]]:
    run = generate_run(num_tasks=num_tasks, repeats=2, seed=seed, fault_rate=0.05, failure_rate=0.2)
    failures = [orjson.dumps(e["row"]) + b"\n" for e in run.events if e["kind"] == "failed"]
    return run.main_lines, failures


def _chunked(rng: random.Random, path: Path, data: bytes, ops: list[list[Any]]) -> None:
    """Write ``data`` in random pieces that cut lines anywhere (partial writes), with pauses."""
    pos = 0
    while pos < len(data):
        size = rng.randint(1, 3000)
        ops.append(["write", str(path), data[pos : pos + size].hex()])
        if rng.random() < 0.3:
            ops.append(["sleep", rng.uniform(0.001, 0.01)])
        pos += size


def _writer_ops(paths: Any, rng: random.Random) -> list[list[Any]]:
    main, failures = paths.rollouts, paths.failures
    a_main, a_fail = _lines(1, 6)
    b_main, b_fail = _lines(2, 8)
    c_main, _ = _lines(3, 4)
    odd = [b"  \t\n", b'{"x": "\xff\xfe"}\n', b"[1, 2]\n", b"\n", b_main[0]]  # blank, non-UTF-8, array, dup
    b_main = b_main[:3] + odd + b_main[3:]
    ops: list[list[Any]] = []
    _chunked(rng, main, b"".join(a_main), ops)
    _chunked(rng, failures, b"".join(a_fail), ops)
    ops += [["sleep", 0.4], ["unlink", str(main), str(failures)]]  # a fresh run starts over
    _chunked(rng, main, b"".join(b_main[:10]), ops)
    _chunked(rng, failures, b"".join(b_fail), ops)
    _chunked(rng, main, b"".join(b_main[10:]), ops)
    keep = len(b"".join(b_main[:7]))
    ops += [["sleep", 0.4], ["truncate", str(main), keep]]  # cut below what was consumed
    _chunked(rng, main, b"".join(c_main) + b'{"torn": [1, ', ops)  # ends without a newline
    return ops


class TestFollower:
    async def test_follows_partial_writes_recreation_truncation_and_restarts(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = tmp_path / "my-run"
        run_dir.mkdir()
        paths = follow_paths(run_dir)
        ops_path = tmp_path / "ops.json"
        ops_path.write_bytes(orjson.dumps(_writer_ops(paths, random.Random(3))))
        settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
        with ServiceThread(settings) as url:

            def follower() -> Follower:
                return Follower(run_dir, sidecar_url=url, poll_interval_s=0.02)

            writer = await asyncio.create_subprocess_exec(*writer_argv(ops_path))
            restarts = 0
            try:
                while writer.returncode is None:  # the follower is stopped and restarted at random
                    stop = asyncio.Event()
                    first = follower()
                    task = asyncio.create_task(first.run(stop))
                    await asyncio.sleep(random.uniform(0.1, 0.5))
                    stop.set()
                    await task
                    restarts += first.restarts
            finally:
                await asyncio.wait_for(writer.wait(), 30)
            assert writer.returncode == 0
            last = follower()
            assert last.run_id == "my-run"
            async with last.client:
                await last.end_run()
            restarts += last.restarts
            assert restarts >= 1 and last.generation >= 1
            files = sidecar_files(url, "my-run")
        assert files == batch_files(run_dir)
        capsys.readouterr()
        verdicts = files[1].decode()
        assert str(paths.rollouts) in verdicts  # unreadable lines' locators name the followed file

    def test_cli_once_equals_the_batch_check(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        main, failures = _lines(4, 6)
        (run_dir / "out.jsonl").write_bytes(b"".join(main))
        (run_dir / "out_failures.jsonl").write_bytes(b"".join(failures))
        plan = {str(task): 2 for task in range(6)}
        (run_dir / "out_materialized_inputs.jsonl").write_bytes(
            b"".join(
                orjson.dumps({"_ng_task_index": int(t), "_ng_rollout_index": r}) + b"\n"
                for t in plan
                for r in range(2)
            )
        )
        settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
        with ServiceThread(settings) as url:
            argv = ["follow", str(run_dir), "--rollouts-file", "out.jsonl", "--sidecar", url, "--once"]
            assert cli_main([*argv, "--run-id", "cli-run"]) == 0
            assert "into run 'cli-run'" in capsys.readouterr().out
            assert cli_main([*argv, "--run-id", "cli-run"]) == 0  # again: nothing new, no double count
            files = sidecar_files(url, "cli-run")
            report = httpx.get(f"{url}/report", params={"run_id": "cli-run"}).json()
        assert files == batch_files(run_dir, "out.jsonl")
        capsys.readouterr()
        assert report["plan_tasks"] == 6
        assert report["events"]["completed"] == sum(1 for line in main if line.strip())
        assert sum(entry["count"] for entry in report["events"]["failed"]) == len(failures)

    async def test_waits_through_a_sidecar_outage_and_stops_promptly(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = tmp_path / "outage"
        run_dir.mkdir()
        main, _ = _lines(5, 8)
        path = run_dir / "rollouts.jsonl"
        sidecar = SidecarProcess(tmp_path / "j.sqlite3", port=free_port())  # kept across restarts
        sidecar.start()
        try:
            config = ClientConfig(backoff_initial_s=0.01, backoff_max_s=0.2)
            follower = Follower(run_dir, sidecar_url=sidecar.url, poll_interval_s=0.02, client_config=config)
            stop = asyncio.Event()
            task = asyncio.create_task(follower.run(stop))
            path.write_bytes(b"".join(main[:5]))
            await asyncio.sleep(0.5)
            sidecar.stop()
            await asyncio.to_thread(_append, path, b"".join(main[5:]))
            await asyncio.sleep(0.5)
            sidecar.start()
            for _ in range(200):
                if follower.positions["rollouts"].offset == path.stat().st_size:
                    break
                await asyncio.sleep(0.05)
            assert follower.positions["rollouts"].offset == path.stat().st_size
            assert follower.client.stats.failed_requests > 0
            stop.set()
            await asyncio.wait_for(task, 10)
            last = Follower(run_dir, sidecar_url=sidecar.url)
            async with last.client:
                await last.end_run()
            files = sidecar_files(sidecar.url, "outage")
        finally:
            sidecar.stop()
        assert files == batch_files(run_dir)
        capsys.readouterr()

    async def test_stop_interrupts_a_follower_blocked_on_an_unreachable_sidecar(self, tmp_path: Path) -> None:
        run_dir = tmp_path / "blocked"
        run_dir.mkdir()
        (run_dir / "rollouts.jsonl").write_bytes(b'{"a": 1}\n')
        url = f"http://127.0.0.1:{free_port()}"
        follower = Follower(run_dir, sidecar_url=url, client_config=ClientConfig(backoff_initial_s=0.01))
        stop = asyncio.Event()
        task = asyncio.create_task(follower.run(stop))
        await asyncio.sleep(0.3)
        stop.set()
        await asyncio.wait_for(task, 5)
        assert follower.positions["rollouts"].offset == 0  # nothing acknowledged, nothing checkpointed


class TestArguments:
    def test_refusals_are_up_front_and_name_the_value(
        self, tmp_path: Path, capsys: pytest.CaptureFixture[str]
    ) -> None:
        with pytest.raises(ValueError, match="'bad id'"):
            Follower(tmp_path, sidecar_url="http://127.0.0.1:9", run_id="bad id")
        argv = ["follow", str(tmp_path / "a b"), "--sidecar", "http://127.0.0.1:9", "--once"]
        (tmp_path / "a b").mkdir()
        assert cli_main(argv) == 2
        assert "'a b' must match" in capsys.readouterr().err

    def test_paths_follow_nemo_gym_naming(self, tmp_path: Path) -> None:
        paths = follow_paths(tmp_path, "b.tar.gz")
        assert paths.failures == tmp_path / "b.tar_failures.jsonl"
        assert paths.materialized == tmp_path / "b.tar_materialized_inputs.jsonl"
        assert paths.source_path == str(tmp_path / "b.tar.gz")
        assert follow_paths(tmp_path, "/x/y.JSONL").failures == Path("/x/y_failures.jsonl")
        assert follow_paths(tmp_path, "rollouts").failures == tmp_path / "rollouts_failures.jsonl"


def test_serve_follow_runs_the_follower_beside_the_service(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "served-run"
    run_dir.mkdir()
    main, failures = _lines(6, 6)
    (run_dir / "rollouts.jsonl").write_bytes(b"".join(main[:4]))
    proc = SidecarProcess(
        tmp_path / "j.sqlite3",
        port=free_port(),  # the follower inside reaches the service on its configured port
        extra_args=("--follow", str(run_dir)),
        log_level="warning",
    )
    url = proc.start()
    try:
        _append(run_dir / "rollouts.jsonl", b"".join(main[4:]))
        _append(run_dir / "rollouts_failures.jsonl", b"".join(failures))
        expected = sum(1 for line in main if line.strip())
        report: dict[str, Any] = {}
        for _ in range(300):
            try:
                response = httpx.get(f"{url}/report", params={"run_id": "served-run"}, timeout=2)
            except httpx.HTTPError:
                response = None
            if response is not None and response.status_code == 200:
                report = response.json()
                if report["events"]["completed"] == expected:
                    break
            time.sleep(0.05)
        assert report["events"]["completed"] == expected
        files = sidecar_files(url, "served-run")
    finally:
        assert proc.stop() == 0
    assert files == batch_files(run_dir)
    capsys.readouterr()


async def test_a_follower_without_state_supersedes_an_earlier_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "rerun"
    run_dir.mkdir()
    first, _ = _lines(7, 5)
    second, _ = _lines(8, 4)
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
    with ServiceThread(settings) as url:
        (run_dir / "rollouts.jsonl").write_bytes(b"".join(first))
        earlier = Follower(run_dir, sidecar_url=url)
        async with earlier.client:
            await earlier.end_run()
        for path in run_dir.iterdir():  # the run directory is deleted and the run done again
            path.unlink()
        (run_dir / "rollouts.jsonl").write_bytes(b"".join(second))
        later = Follower(run_dir, sidecar_url=url)
        assert later.generation > earlier.generation
        async with later.client:
            await later.end_run()
        files = sidecar_files(url, "rerun")
    assert files == batch_files(run_dir)
    capsys.readouterr()


async def test_the_plan_is_read_once_the_run_writes_its_first_row(tmp_path: Path) -> None:
    run_dir = tmp_path / "planned"
    run_dir.mkdir()
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
    with ServiceThread(settings) as url:
        follower = Follower(run_dir, sidecar_url=url, poll_interval_s=0.02)
        stop = asyncio.Event()
        task = asyncio.create_task(follower.run(stop))
        await asyncio.sleep(0.2)  # the follower is up before NeMo Gym writes anything
        rows = [{"_ng_task_index": task, "_ng_rollout_index": r} for task in range(3) for r in range(2)]
        (run_dir / "rollouts_materialized_inputs.jsonl").write_bytes(
            b"".join(orjson.dumps(row) + b"\n" for row in rows)
        )
        main, _ = _lines(9, 3)
        (run_dir / "rollouts.jsonl").write_bytes(main[0])
        for _ in range(100):
            if follower.positions["rollouts"].offset:
                break
            await asyncio.sleep(0.05)
        stop.set()
        await task
        async with httpx.AsyncClient(base_url=url) as client:
            report = (await client.get("/report", params={"run_id": "planned"})).json()
    assert report["plan_tasks"] == 3 and report["accounting"]["expected"] == 6


@pytest.mark.parametrize("latency_from_rows", [True, False])
async def test_rows_measured_latency_feeds_the_tracker_unless_told_not_to(
    tmp_path: Path, latency_from_rows: bool
) -> None:
    run_dir = tmp_path / "timed"
    run_dir.mkdir()
    run = generate_run(num_tasks=4, repeats=2, seed=12, fault_rate=0.0, failure_rate=0.0, drained_fraction=0)
    rows = [event["row"] for event in run.events if event["kind"] == "completed"]
    latencies = [1000.0 * (index + 1) for index in range(len(rows))]
    for row, latency in zip(rows, latencies, strict=True):
        row["ng_perf"] = build_ng_perf(row, latency)
    assert all(row["ng_perf"] is not None for row in rows)
    (run_dir / "rollouts.jsonl").write_bytes(b"".join(orjson.dumps(row) + b"\n" for row in rows))
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
    with ServiceThread(settings) as url:
        follower = Follower(run_dir, sidecar_url=url, latency_from_rows=latency_from_rows)
        async with follower.client:
            await follower.end_run()
            report = await follower.client.report()
    expected = DispatchLatencyTracker()
    if latency_from_rows:
        for latency in latencies:
            expected.record(latency / 1000.0)
    assert report["latency"]["samples"] == expected.count
    assert report["latency"]["summary"] == expected.summary()
    assert report["perf_summary"] == compute_perf_summary([row["ng_perf"] for row in rows], len(rows))


@pytest.mark.parametrize("read_bytes", [64, 1000, 8 << 20])
async def test_small_reads_and_a_torn_tail_equal_the_batch_check(
    tmp_path: Path, read_bytes: int, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "chunks"
    run_dir.mkdir()
    main, _ = _lines(10, 4)
    (run_dir / "rollouts.jsonl").write_bytes(b"".join(main) + b"\n  \n" + main[1][:100])  # torn tail
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
    with ServiceThread(settings) as url:
        follower = Follower(run_dir, sidecar_url=url, read_bytes=read_bytes)
        async with follower.client:
            await follower.end_run()
        files = sidecar_files(url, "chunks")
    assert files == batch_files(run_dir)
    capsys.readouterr()


async def test_a_remote_tracker_and_a_follower_feed_one_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "mixed"
    run_dir.mkdir()
    main, _ = _lines(11, 4)
    (run_dir / "rollouts.jsonl").write_bytes(b"".join(main))
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
    with ServiceThread(settings) as url:
        config = ClientConfig(backoff_initial_s=0.01, backoff_max_s=0.1)
        # NeMo Gym's tracker starts first; the follower (a later generation) starts the run.
        tracker = RemoteLatencyTracker(url, run_id="mixed", start_run=False, config=config)
        for seconds in (10.0, 20.0, 30.0, 40.0, 50.0, 60.0):
            tracker.record(seconds)
        await asyncio.sleep(0.2)
        follower = Follower(run_dir, sidecar_url=url, latency_from_rows=False)
        async with follower.client:
            await follower.end_run()
            assert await asyncio.to_thread(tracker.flush, 10)
            margin = await follower.client.drain_margin_info()
        tracker.close()
        files = sidecar_files(url, "mixed")
    assert tracker.stats.rejected == 0 and tracker.stats.retried > 0
    assert margin["samples"] == 6 and margin["drain_margin"] == tracker.drain_margin(None)
    assert files == batch_files(run_dir)
    capsys.readouterr()


async def test_a_follower_process_killed_at_random_neither_skips_nor_double_counts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "killed"
    run_dir.mkdir()
    paths = follow_paths(run_dir)
    ops_path = tmp_path / "ops.json"
    ops = [["sleep", op[1] * 5] if op[0] == "sleep" else op for op in _writer_ops(paths, random.Random(8))]
    ops_path.write_bytes(orjson.dumps(ops))  # slower: several follower lifetimes
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
    rng = random.Random(13)
    with ServiceThread(settings) as url:
        follow = [sys.executable, "-m", "sidecar.cli", "follow", str(run_dir), "--sidecar", url]
        follow += ["--poll-interval", "0.02"]
        writer = await asyncio.create_subprocess_exec(*writer_argv(ops_path))
        kills = 0
        while writer.returncode is None:
            proc = await asyncio.create_subprocess_exec(*follow, cwd=REPO_ROOT, stdout=subprocess.DEVNULL)
            await asyncio.sleep(rng.uniform(0.3, 1.0))  # the interpreter starts in ~0.5 s
            proc.kill()
            await proc.wait()
            kills += 1
        await asyncio.wait_for(writer.wait(), 30)
        last = await asyncio.create_subprocess_exec(
            *follow, "--once", cwd=REPO_ROOT, stdout=subprocess.DEVNULL
        )
        assert await asyncio.wait_for(last.wait(), 30) == 0
        files = sidecar_files(url, "killed")
    assert kills >= 3
    assert files == batch_files(run_dir)
    capsys.readouterr()


def _state(follower: Follower) -> dict[str, Any]:
    body: dict[str, Any] = orjson.loads(follower.state_path.read_bytes())
    return body


async def test_sent_lines_are_recorded_before_the_sidecar_sees_them_and_dropped_once_checkpointed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "intent"
    run_dir.mkdir()
    main, _ = _lines(13, 3)
    rollouts = run_dir / "rollouts.jsonl"
    rollouts.write_bytes(b"".join(main[:2]))
    with ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")) as url:
        follower = Follower(run_dir, sidecar_url=url)
        async with follower.client:
            await follower.step()
            assert _state(follower)["sent"] == {}
            seen: list[dict[str, Any]] = []
            submit = follower.client.submit_event

            def snapshot_then_submit(event: Any, **options: Any) -> Any:
                seen.append(_state(follower))
                return submit(event, **options)

            monkeypatch.setattr(follower.client, "submit_event", snapshot_then_submit)
            _append(rollouts, b"".join(main[2:4]))
            await follower.step()
    two, four = len(b"".join(main[:2])), len(b"".join(main[:4]))
    assert len(seen) == 2 and seen[0] == seen[1]
    assert seen[0]["files"]["rollouts"]["offset"] == two  # the checkpoint has not moved yet
    assert seen[0]["sent"]["rollouts"]["start"] == two and seen[0]["sent"]["rollouts"]["end"] == four
    after = _state(follower)
    assert after["files"]["rollouts"]["offset"] == four and after["sent"] == {}


@pytest.mark.parametrize("rewritten", [False, True])
async def test_a_follower_killed_after_the_ack_resends_intact_lines_and_restarts_over_changed_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], rewritten: bool
) -> None:
    run_dir = tmp_path / "killed"
    run_dir.mkdir()
    main, _ = _lines(14, 4)
    rollouts = run_dir / "rollouts.jsonl"
    rollouts.write_bytes(b"".join(main[:3]))
    with ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")) as url:
        first = Follower(run_dir, sidecar_url=url)
        async with first.client:
            await first.step()
            at_ack = first.state_path.read_bytes()
            flush = first.client.flush

            async def flush_then_snapshot(timeout_s: float | None = None) -> bool:
                nonlocal at_ack
                acknowledged = await flush(timeout_s)
                at_ack = first.state_path.read_bytes()  # what a SIGKILL right here leaves
                return acknowledged

            monkeypatch.setattr(first.client, "flush", flush_then_snapshot)
            _append(rollouts, b"".join(main[3:6]))
            await first.step()
        first.state_path.write_bytes(at_ack)
        if rewritten:  # cut back to the checkpoint (whose bytes stay intact) and written anew
            os.truncate(rollouts, len(b"".join(main[:3])))
            _append(rollouts, b"".join(main[6:8]))
        second = Follower(run_dir, sidecar_url=url)
        assert second.generation == first.generation and second.sent
        async with second.client:
            await second.end_run()
        files = sidecar_files(url, "killed")
    assert (second.generation > first.generation) is rewritten and second.restarts == int(rewritten)
    assert files == batch_files(run_dir)
    capsys.readouterr()


async def test_an_unterminated_line_sent_by_end_run_stays_guarded_through_a_resume_repair(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "repaired"
    run_dir.mkdir()
    main, _ = _lines(15, 3)
    rollouts = run_dir / "rollouts.jsonl"
    rollouts.write_bytes(b"".join(main[:3]) + main[3][:-20])  # the run died mid-line
    with ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")) as url:
        first = Follower(run_dir, sidecar_url=url)
        async with first.client:
            await first.end_run()
        assert _state(first)["sent"]["rollouts"]["terminated"] is False
        os.truncate(rollouts, len(b"".join(main[:3])))  # NeMo Gym's resume cuts the torn line ...
        _append(rollouts, b"".join(main[4:6]))  # ... and the resumed run writes on
        second = Follower(run_dir, sidecar_url=url)
        async with second.client:
            await second.end_run()
        files = sidecar_files(url, "repaired")
    assert second.generation > first.generation
    assert files == batch_files(run_dir)
    capsys.readouterr()


async def test_a_line_the_client_drops_stops_the_follower_without_moving_the_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "overflow"
    run_dir.mkdir()
    main, _ = _lines(12, 3)
    (run_dir / "rollouts.jsonl").write_bytes(b"".join(main))
    tiny = ClientConfig(max_buffered_bytes=max(len(line) for line in main) // 2)  # no spool: drops
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
    with ServiceThread(settings) as url:
        starved = Follower(run_dir, sidecar_url=url, client_config=tiny)
        async with starved.client:
            with pytest.raises(FollowerError, match="dropped by the client"):
                await starved.step()
        assert starved.client.stats.dropped > 0
        resumed = Follower(run_dir, sidecar_url=url)  # same state file: re-sends what was lost
        assert resumed.positions["rollouts"].line_number == 0
        async with resumed.client:
            await resumed.end_run()
        files = sidecar_files(url, "overflow")
    assert files == batch_files(run_dir)
    capsys.readouterr()


def _placeholder(number: int, size: int) -> bytes:
    """What the follower sends in place of a line over the cap: an unreadable line of that number."""
    return orjson.dumps(f"rollout-sidecar follow: line {number} of {size} bytes, over the cap, not read")


@pytest.mark.parametrize("cap", ["follower", "sidecar"])
async def test_a_line_over_the_cap_is_reported_unreadable_and_the_follower_goes_on(
    tmp_path: Path, cap: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One runaway row (over the follower's ``max_line_bytes``, or refused 413 by the sidecar's body
    cap) costs one ``record_unreadable`` at its line number; every line after it is still followed,
    and the reports equal the batch check over the file with that line unreadable."""
    run_dir = tmp_path / "runaway"
    run_dir.mkdir()
    main, _ = _lines(12, 4)
    huge = main[2][:-2] + b', "runaway": "' + b"x" * 300_000 + b'"}\n'
    lines = [*main[:3], huge, *main[3:]]
    (run_dir / "rollouts.jsonl").write_bytes(b"".join(lines))
    options: dict[str, Any] = {"max_line_bytes": 100_000} if cap == "follower" else {"raw_line_bytes": 50_000}
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3", body_cap=200_000)
    with ServiceThread(settings) as url:
        follower = Follower(run_dir, sidecar_url=url, read_bytes=4096, **options)
        async with follower.client:
            await follower.end_run()
        files = sidecar_files(url, "runaway")
    assert follower.lines_skipped == 1 and follower.lines_sent == len(lines)
    unreadable = _placeholder(4, len(huge) - 1) + b"\n"
    (run_dir / "rollouts.jsonl").write_bytes(b"".join([*main[:3], unreadable, *main[3:]]))
    assert files == batch_files(run_dir)
    assert b'"record_unreadable"' in files[1] and b'"line":4}' in files[1]
    assert f"line 4 of {len(huge) - 1} bytes is over the" in caplog.text


async def test_an_unterminated_last_line_over_the_cap_waits_then_ends_the_run_unreadable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir = tmp_path / "torn"
    run_dir.mkdir()
    main, _ = _lines(13, 3)
    cap = max(len(line) for line in main)
    tail = b'{"runaway": "' + b"y" * cap
    (run_dir / "rollouts.jsonl").write_bytes(b"".join(main) + tail)
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
    with ServiceThread(settings) as url:
        follower = Follower(run_dir, sidecar_url=url, read_bytes=1024, max_line_bytes=cap)
        async with follower.client:
            assert await follower.step() == len(main)  # the unterminated line is not sent while it may grow
            await follower.end_run()
        files = sidecar_files(url, "torn")
    assert follower.lines_skipped == 1
    (run_dir / "rollouts.jsonl").write_bytes(b"".join(main) + _placeholder(len(main) + 1, len(tail)))
    assert files == batch_files(run_dir)
    capsys.readouterr()
