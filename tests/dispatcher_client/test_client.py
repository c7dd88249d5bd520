"""SidecarClient against a real sidecar on loopback: exactly once, outages, restarts, rejections."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from dispatcher_client import ClientConfig, SidecarClient, SidecarError
from sidecar.http.server import ServiceThread
from sidecar.http.settings import Secret, ServiceSettings
from sidecar.perf import DispatchLatencyTracker, build_ng_perf
from tests.sidecar.service_support import GeneratedRun, generate_run

from .support import SidecarProcess, batch_files, free_port, sidecar_files, stable_report

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def generated() -> GeneratedRun:
    return generate_run(num_tasks=14, repeats=3, seed=5, fault_rate=0.05, failure_rate=0.15)


async def _play(client: SidecarClient, run: GeneratedRun, events: list[dict[str, Any]]) -> int:
    """Drive ``events`` through the client's API the way a dispatcher would; returns completions."""
    completions = 0
    for event in events:
        kind = event["kind"]
        if kind == "completed" and "row" in event:
            perf = await client.completed(None, event["row"], seconds=event["seconds"])
            expected = build_ng_perf(event["row"], event["seconds"] * 1000.0)
            assert orjson.dumps(perf) == orjson.dumps(expected)
            completions += 1
        elif kind == "failed":
            await client.failed(None, event["row"], seconds=event["seconds"])
        elif kind == "drained":
            row = {"_ng_task_index": event["task_index"], "_ng_rollout_index": event["rollout_index"]}
            await client.drained(row)
        else:
            client.submit_event(event)
    return completions


async def _until_outage_seen(client: SidecarClient, timeout_s: float = 10.0) -> None:
    """Give the batcher time to try a send to the dead sidecar: on a loaded machine playing the
    events can finish before its first attempt fails, so ``stats`` is read after one has."""
    for _ in range(int(timeout_s / 0.02)):
        if client.stats.failed_requests and not client.stats.connected:
            return
        await asyncio.sleep(0.02)


def _start(client: SidecarClient, run: GeneratedRun, run_dir: Path) -> Any:
    return client.start_run(plan=run.plan, source_path=str(run_dir / "rollouts.jsonl"))


class TestExactlyOnce:
    async def test_generated_run_arrives_once_and_matches_batch(
        self, tmp_path: Path, generated: GeneratedRun, capsys: pytest.CaptureFixture[str]
    ) -> None:
        run_dir = tmp_path / "run"
        generated.write_rollouts(run_dir)
        settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
        with ServiceThread(settings) as url:
            async with SidecarClient(url, run_id="once") as client:
                await _start(client, generated, run_dir)
                await _play(client, generated, generated.events)
                await client.run_ended()
                assert await client.flush(20)
                stats = client.stats
                total = len(generated.events) + 2
                assert (stats.submitted, stats.sent) == (total, total)
                assert (stats.duplicates, stats.dropped, stats.rejected, stats.retried) == (0, 0, 0, 0)
                assert stats.requests < total  # batched
                report = await client.report()
                margin = await client.drain_margin_info()
            files = sidecar_files(url, "once")
        assert files == batch_files(run_dir)
        capsys.readouterr()
        tracker = generated.local_tracker()
        assert margin["drain_margin"] == tracker.drain_margin(None)
        assert margin["samples"] == tracker.count and margin["drained"] == tracker.drained
        assert report["latency"]["summary"] == tracker.summary()
        completed = sum(1 for event in generated.events if event["kind"] == "completed")
        assert report["events"]["completed"] == completed

    async def test_a_refused_event_does_not_hold_back_its_batch(self, tmp_path: Path) -> None:
        settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
        with ServiceThread(settings) as url:
            async with SidecarClient(url, run_id="bad", config=ClientConfig(linger_s=0.05)) as client:
                await client.start_run()
                for index in range(9):
                    if index == 4:
                        client.submit_event({"kind": "drained", "task_index": 1.5})  # not an index
                    else:
                        await client.drained({"_ng_task_index": index, "_ng_rollout_index": 0})
                assert await client.flush(10)
                assert client.stats.rejected == 1
                assert client.stats.sent == 9  # run_started + 8 drains
                report = await client.report()
        assert report["events"]["drained"] == 8

    async def test_a_sidecar_with_a_fresh_journal_gets_run_started_again(self, tmp_path: Path) -> None:
        port = free_port()
        config = ClientConfig(backoff_initial_s=0.01, backoff_max_s=0.2)
        with SidecarProcess(tmp_path / "a.sqlite3", port=port) as url:
            client = await SidecarClient(url, run_id="fresh", config=config).open()
            await client.start_run(plan={0: 2})
            await client.drained({"_ng_task_index": 0, "_ng_rollout_index": 0})
            assert await client.flush(10)
        with SidecarProcess(tmp_path / "b.sqlite3", port=port):  # the first journal is gone
            await client.drained({"_ng_task_index": 0, "_ng_rollout_index": 1})
            assert await client.flush(15)
            report = await client.report()
            await client.aclose()
        assert report["plan_tasks"] == 1
        assert report["events"]["drained"] == 1


class TestOutage:
    @pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
    async def test_stop_and_restart_mid_run_equals_an_uninterrupted_run(
        self, tmp_path: Path, generated: GeneratedRun, capsys: pytest.CaptureFixture[str], sig: int
    ) -> None:
        run_dir = tmp_path / "run"
        generated.write_rollouts(run_dir)
        config = ClientConfig(
            max_buffered_events=8,  # small: the outage spills to the on-disk spool
            spool_dir=tmp_path / "spool",
            backoff_initial_s=0.01,
            backoff_max_s=0.2,
            ack_timeout_s=0.2,
        )
        sidecar = SidecarProcess(tmp_path / "journal.sqlite3", port=free_port())  # kept across restarts
        half = len(generated.events) // 2
        sidecar.start()
        try:
            async with SidecarClient(sidecar.url, run_id="steady") as steady:
                await _start(steady, generated, run_dir)
                await _play(steady, generated, generated.events)
                await steady.run_ended()
                assert await steady.flush(20)
            client = await SidecarClient(sidecar.url, run_id="bumpy", config=config).open()
            await _start(client, generated, run_dir)
            await _play(client, generated, generated.events[:half])
            if sig == signal.SIGTERM:
                assert await client.flush(20)
            # SIGKILL: whatever is in flight is lost or committed unanswered
            if sig == signal.SIGKILL:
                sidecar.kill()
            else:
                sidecar.stop()

            started = time.monotonic()
            completions = await _play(client, generated, generated.events[half:])
            await client.run_ended()
            elapsed = time.monotonic() - started
            await _until_outage_seen(client)
            stats = client.stats
            assert not stats.connected and stats.failed_requests > 0
            assert stats.spooled > 0 and stats.dropped == 0
            assert stats.local_ng_perf >= completions - 1  # at most one waited for an answer
            assert elapsed < 0.2 * completions + 5  # nothing waits for the sidecar

            sidecar.start()
            assert await client.flush(30)
            assert client.stats.dropped == 0 and client.stats.rejected == 0
            assert client.stats.spool_pending_bytes == 0
            bumpy = await client.report()
            steady_report = await SidecarClient(sidecar.url, run_id="steady").open()
            smooth = await steady_report.report()
            await steady_report.aclose()
            await client.aclose()
            files = sidecar_files(sidecar.url, "bumpy")
            assert files == sidecar_files(sidecar.url, "steady")
        finally:
            sidecar.stop()
        assert stable_report(bumpy) == stable_report(smooth)
        assert files == batch_files(run_dir)
        capsys.readouterr()
        assert not list((tmp_path / "spool").glob("*.jsonl"))  # delivered spool is reclaimed

    async def test_unreachable_sidecar_drops_past_the_bound_and_counts_it(self, tmp_path: Path) -> None:
        config = ClientConfig(max_buffered_events=5, backoff_initial_s=0.01, close_timeout_s=0.1)
        url = f"http://127.0.0.1:{free_port()}"  # nothing listens
        client = await SidecarClient(url, run_id="void", config=config).open()
        started = time.monotonic()
        for index in range(20):
            await client.drained({"_ng_task_index": index, "_ng_rollout_index": 0})
        row = {"ng_trajectory": None}
        assert await client.completed(None, row, seconds=1.0) is None
        assert time.monotonic() - started < 2.0
        assert client.stats.dropped > 0
        assert client.stats.buffered <= 5
        with pytest.raises(SidecarError, match="failed"):
            await client.drain_margin(strict=True)
        for seconds in (10.0, 20.0, 30.0, 40.0):
            await client.completed(None, row, seconds=seconds, wait=False)
        await client.failed(None, {}, seconds=35.0)
        reference = DispatchLatencyTracker()
        for seconds in (1.0, 10.0, 20.0, 30.0, 40.0):
            reference.record(seconds)
        reference.record_failure(35.0)
        for _ in range(20):
            reference.record_drained()
        assert await client.drain_margin() == reference.drain_margin(None) is not None  # fails open
        assert await client.drain_margin(12.0) == 12.0
        assert client.stats.local_drain_margin == 2 and client.local.drained == 20
        await client.aclose()
        stats = client.stats
        assert (stats.submitted, stats.sent, stats.spooled) == (26, 0, 0)
        assert stats.dropped == 26  # everything not delivered is counted

    async def test_retried_batches_are_duplicates_not_double_counts(self, tmp_path: Path) -> None:
        settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
        with ServiceThread(settings) as url:
            calls = {"n": 0}

            class LossyAcks(httpx.AsyncHTTPTransport):
                """Delivers every request but loses the first two answers (a timeout after commit)."""

                async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                    response = await super().handle_async_request(request)
                    calls["n"] += 1
                    if request.url.path.endswith("/events") and calls["n"] in (2, 3):
                        await response.aread()
                        raise httpx.ReadTimeout("answer lost", request=request)
                    return response

            config = ClientConfig(backoff_initial_s=0.01, linger_s=0.01)
            async with SidecarClient(url, run_id="lossy", config=config, transport=LossyAcks()) as client:
                await client.start_run()
                assert await client.flush(10)
                for index in range(6):
                    await client.drained({"_ng_task_index": index, "_ng_rollout_index": 0})
                assert await client.flush(10)
                assert client.stats.retried >= 6 and client.stats.duplicates == 6
                report = await client.report()
        assert report["events"]["drained"] == 6


class TestExactDuplicates:
    async def test_two_calls_with_one_row_are_two_records_and_retries_are_not(
        self, tmp_path: Path, generated: GeneratedRun
    ) -> None:
        """The dispatcher writes a row twice: the batch check flags both lines
        (``rollout_duplicate_identity``, ``duplicate_count`` 2); so must the live report, even
        though every answer of the first sends is lost and the batches are retried."""
        twice = next(e for e in generated.events if e["kind"] == "completed" and "row" in e)
        line = next(x for x in generated.main_lines if orjson.loads(x) == twice["row"])
        run_dir = tmp_path / "run"
        generated.write_rollouts(run_dir)
        with (run_dir / "rollouts.jsonl").open("ab") as handle:
            handle.write(line)
        lost = {"n": 0}

        class LossyAcks(httpx.AsyncHTTPTransport):
            """Delivers every request but loses the answers of the first three event posts."""

            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                response = await super().handle_async_request(request)
                if request.url.path.endswith("/events") and lost["n"] < 3:
                    lost["n"] += 1
                    await response.aread()
                    raise httpx.ReadTimeout("answer lost", request=request)
                return response

        settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
        config = ClientConfig(backoff_initial_s=0.01, linger_s=0.01, ack_timeout_s=0.0)
        with ServiceThread(settings) as url:
            async with SidecarClient(url, run_id="dup", config=config, transport=LossyAcks()) as client:
                await _start(client, generated, run_dir)
                await _play(client, generated, generated.events)
                await client.completed(None, twice["row"], seconds=twice["seconds"])
                await client.run_ended()
                assert await client.flush(20)
                assert client.stats.retried >= 3 and client.stats.duplicates >= 1
            files = sidecar_files(url, "dup")
        assert files == batch_files(run_dir)
        identity = (twice["row"]["_ng_task_index"], twice["row"]["_ng_rollout_index"])
        verdicts = [orjson.loads(row) for row in files[1].splitlines()]
        both = [v for v in verdicts if (v["_ng_task_index"], v["_ng_rollout_index"]) == identity]
        assert len(both) == 2
        for verdict in both:
            duplicate = [f for f in verdict["findings"] if f["check"] == "rollout_duplicate_identity"]
            assert [f["detail"] for f in duplicate] == [{"duplicate_count": 2}]


async def test_a_slow_sidecar_costs_one_ack_timeout_not_one_per_completion(tmp_path: Path) -> None:
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3")
    with ServiceThread(settings) as url:
        slow = {"on": True}

        class SlowAcks(httpx.AsyncHTTPTransport):
            async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
                if slow["on"] and request.url.path.endswith("/events"):
                    await asyncio.sleep(0.6)
                return await super().handle_async_request(request)

        config = ClientConfig(ack_timeout_s=0.1, linger_s=0.0)
        row = generate_run(num_tasks=1, repeats=1, seed=3, fault_rate=0.0, failure_rate=0.0).events[0]["row"]
        async with SidecarClient(url, run_id="slow", config=config, transport=SlowAcks()) as client:
            await client.start_run()
            started = time.monotonic()
            for _ in range(10):
                perf = await client.completed(None, row, seconds=2.0)
                assert perf == build_ng_perf(row, 2000.0)
            assert time.monotonic() - started < 0.5  # one 0.1 s wait, then none
            assert client.stats.local_ng_perf == 10
            slow["on"] = False
            assert await client.flush(10)
            await client.completed(None, row, seconds=3.0)  # answers flow again: waits, gets the sidecar's
            assert client.stats.local_ng_perf == 10


async def test_a_spool_left_by_a_dead_client_is_delivered_by_the_next(tmp_path: Path) -> None:
    port = free_port()
    spool = tmp_path / "spool"
    config = ClientConfig(spool_dir=spool, backoff_initial_s=0.01, close_timeout_s=0.05)
    first = await SidecarClient(f"http://127.0.0.1:{port}", run_id="handover", config=config).open()
    await first.start_run(plan={0: 3, 1: 3})
    for task in range(2):
        for rollout in range(3):
            await first.drained({"_ng_task_index": task, "_ng_rollout_index": rollout})
    await first.aclose()  # the sidecar never answered: everything goes to the spool
    assert first.stats.spooled == 7 and first.stats.dropped == 0
    assert (spool / "spool-handover.jsonl").stat().st_size > 0
    with SidecarProcess(tmp_path / "j.sqlite3", port=port):
        async with SidecarClient(f"http://127.0.0.1:{port}", run_id="handover", config=config) as second:
            assert await second.flush(15)
            assert second.stats.sent == 7 and second.stats.submitted == 0
            report = await second.report()
    assert report["events"]["drained"] == 6 and report["accounting"]["drained"] == 6
    assert not (spool / "spool-handover.jsonl").exists()


async def test_buffer_bounds_spill_oldest_first_and_drop_only_past_the_spool(tmp_path: Path) -> None:
    config = ClientConfig(
        max_buffered_events=4,
        max_buffered_bytes=1000,
        spool_dir=tmp_path,
        spool_max_bytes=600,
        backoff_initial_s=5.0,  # the one failed request is not retried during the test
        close_timeout_s=0.0,
    )
    client = await SidecarClient(f"http://127.0.0.1:{free_port()}", run_id="bounds", config=config).open()
    for index in range(6):
        client.submit_event({"kind": "drained", "task_index": index})
    await asyncio.sleep(0.1)  # the sender takes a batch in flight and fails
    client.submit_event({"kind": "drained", "task_index": 99, "row": {"pad": "x" * 1200}})
    for index in range(6, 40):
        client.submit_event({"kind": "drained", "task_index": index})
    stats = client.stats
    spooled = [orjson.loads(line) for line in (tmp_path / "spool-bounds.jsonl").read_bytes().splitlines()]
    assert stats.dropped > 0 and stats.spooled == len(spooled) and stats.buffered == 4
    assert [event["task_index"] for event in spooled] == sorted(event["task_index"] for event in spooled)
    assert 99 not in [event["task_index"] for event in spooled]  # 1.2 kB alone: past the spool's room
    assert stats.submitted == 41
    await client.aclose()
    assert client.stats.dropped + client.stats.spooled + client.stats.sent == 41


async def test_a_row_that_is_not_json_is_refused_locally_without_raising(tmp_path: Path) -> None:
    client = await SidecarClient(f"http://127.0.0.1:{free_port()}", run_id="odd").open()
    perf = await client.completed(None, {"bad": {1, 2}}, seconds=1.0, wait=True)
    assert perf is None
    assert client.stats.rejected == 1 and client.stats.local_ng_perf == 1
    odd_keys: dict[Any, Any] = {1: "integer keys are encoded as strings"}
    await client.drained({"_ng_task_index": 1, "_ng_rollout_index": 0}, odd_keys)
    assert client.stats.rejected == 1 and client.stats.buffered == 1
    await client.aclose(0.0)


async def test_the_bearer_token_is_sent_and_a_wrong_one_is_refused_without_bisecting(tmp_path: Path) -> None:
    settings = ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3", token=Secret("s3cret"))
    with ServiceThread(settings) as url:
        async with SidecarClient(url, run_id="auth", token="s3cret") as good:
            await good.start_run()
            await good.drained({"_ng_task_index": 0, "_ng_rollout_index": 0})
            assert await good.flush(10)
            assert good.stats.sent == 2 and good.stats.rejected == 0
            assert (await good.report())["events"]["drained"] == 1
        config = ClientConfig(linger_s=0.05)
        async with SidecarClient(url, run_id="auth", token="wrong", config=config) as bad:
            for index in range(1, 65):
                await bad.drained({"_ng_task_index": index, "_ng_rollout_index": 0})
            assert await bad.flush(10)
            assert bad.stats.rejected == 64 and bad.stats.requests <= 2
        async with SidecarClient(url, run_id="auth", token="s3cret") as good:
            assert (await good.report())["events"]["drained"] == 1


async def test_start_run_passes_the_tracker_runs_to_log_into(tmp_path: Path) -> None:
    tracking = {"mlflow_run_id": "0f" * 16, "wandb_run_path": "team/rollouts/abc123"}
    thread = ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3"))
    with thread as url:
        async with SidecarClient(url, run_id="tracked") as client:
            await client.start_run(plan={0: 1}, tracking=tracking)
            assert await client.flush(10)
        async with SidecarClient(url, run_id="refused", config=ClientConfig(linger_s=0.05)) as client:
            await client.start_run(tracking={"mlflow_run_id": "not an id"})
            assert await client.flush(10)
            assert client.stats.rejected == 1  # the sidecar's 422 names the field
        assert thread.service is not None
        config = thread.service.ingestor.runs["tracked"].config
    assert config.tracking is not None and config.tracking.model_dump() == tracking
