"""Crash: SIGKILL the service at random moments while a client streams a generated run.

A streamer thread posts the run in random-sized batches and retries a batch (same events,
so same idempotency keys) until it is acknowledged, following the service to its new port
after each restart. A killer thread SIGKILLs the service at random moments. After every kill,
before the restart, every event acknowledged so far must be in the journal file; after every
restart ``/readyz`` must report exactly the journal's events after the newest valid snapshot;
at the end the journal holds each event exactly once and the sidecar's report files equal the
batch health check's bytes, and the page's per-agent figures (two agents) equal those of the
events applied once. With ``--snapshot-every-events`` small, kills also land while a snapshot is
written.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from sidecar.journal import Journal

from .sidecar_process import Launch, SidecarProcess, reap_orphans
from .workload import (
    AGENT_KEYS,
    GeneratedRun,
    batch_files,
    expected_agents,
    generate_run,
    journal_keys,
    report_files,
    two_agents,
)

__all__ = ["CrashResult", "run_crash_trials"]


@dataclass
class CrashResult:
    trials: int = 0
    """SIGKILLs delivered while the stream had unacknowledged events."""
    idle_kills: int = 0
    """SIGKILLs that landed after the stream finished (not counted as trials)."""
    runs: int = 0
    events_acked: int = 0
    retried_batches: int = 0
    duplicate_acks: int = 0
    """Events a retry found already journaled (the response was lost in the kill)."""
    orphans: int = 0
    """Processes the killed service left behind (its worker pool) still running after the grace."""
    restart_seconds: list[float] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)


class _Streamer(threading.Thread):
    def __init__(self, run: GeneratedRun, proc: SidecarProcess, rng: random.Random, pause_s: float) -> None:
        super().__init__(name="crash-streamer", daemon=True)
        self.pause_s = pause_s
        self.run_ = run
        self.proc = proc
        self.rng = rng
        self.acked: list[str] = []
        self.acks: dict[str, tuple[int | None, str, str]] = {}
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.retried = 0
        self.duplicates = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._stream()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    def _stream(self) -> None:
        events = self.run_.events
        keys = self.run_.idempotency_keys()
        position = 0
        deadline = time.monotonic() + 300
        with httpx.Client(timeout=5.0) as client:
            while position < len(events):
                size = self.rng.randint(1, 8)
                batch = events[position : position + size]
                while True:
                    if time.monotonic() > deadline:
                        raise TimeoutError("stream did not finish within 300 s")
                    url = self.proc.url
                    if not url:
                        time.sleep(0.01)
                        continue
                    try:
                        response = client.post(f"{url}/v1/runs/{self.run_.run_id}/events", json=batch)
                    except httpx.HTTPError:
                        self.retried += 1
                        time.sleep(0.01)
                        continue
                    if response.status_code != 200:
                        raise AssertionError(
                            f"batch at {position}: HTTP {response.status_code} {response.text}"
                        )
                    results = response.json()["results"]
                    statuses = [r["status"] for r in results]
                    break
                with self.lock:
                    self.acked.extend(keys[position : position + len(batch)])
                    for key, answer in zip(keys[position : position + len(batch)], results, strict=True):
                        self.acks[key] = (answer.get("seq"), answer["status"], url)
                self.duplicates += statuses.count("duplicate")
                if any(s not in ("accepted", "duplicate") for s in statuses):
                    raise AssertionError(f"batch at {position}: statuses {statuses}")
                position += len(batch)
                time.sleep(self.rng.uniform(0.0, self.pause_s))


def _snapshot_seq(journal: Path) -> int:
    """Seq of the newest stored snapshot whose CRC holds (0: none), as a restart chooses it."""
    return max((seq for seq, body in Journal(journal).snapshots() if body is not None), default=0)


def _one_run(
    index: int,
    workdir: Path,
    *,
    kills: int,
    num_tasks: int,
    seed: int,
    launch: Launch,
    max_gap_s: float,
    serve_args: tuple[str, ...],
    orphan_grace_s: float,
    result: CrashResult,
) -> None:
    rng = random.Random(seed * 1000 + index)
    run_dir = workdir / f"run-{index}"
    seeded = seed + index
    run = generate_run(f"crash-{index}", run_dir, num_tasks=num_tasks, seed=seeded, text_hook=two_agents)
    run.write_files()
    journal = workdir / f"run-{index}" / "state" / "journal.sqlite3"
    proc = SidecarProcess(
        journal, workdir / f"run-{index}" / "sidecar.log", launch=launch, extra_args=serve_args
    )
    proc.start()
    streamer = _Streamer(run, proc, rng, pause_s=0.01)
    streamer.start()
    try:
        for _ in range(kills):
            if streamer.done.wait(rng.uniform(0.0, max_gap_s)):
                break
            streaming = not streamer.done.is_set()
            children = proc.freeze_and_list_descendants()  # stopped first: it cannot spawn more
            proc.kill()
            if streaming:
                result.trials += 1
            else:
                result.idle_kills += 1
            with streamer.lock:
                acked = list(streamer.acked)
            stored = set(journal_keys(journal))
            lost = [key for key in acked if key not in stored]
            if lost:
                result.violations.append(
                    f"run {index}: {len(lost)} acknowledged event(s) lost, e.g. {lost[0]}"
                )
            left = reap_orphans(children, orphan_grace_s)
            if left:
                result.orphans += len(left)
                result.violations.append(
                    f"run {index}: SIGKILL left {len(left)} orphaned process(es) running"
                )
            covered = _snapshot_seq(journal)  # records the snapshot the restart loads holds
            began = time.monotonic()
            url = proc.start()
            result.restart_seconds.append(time.monotonic() - began)
            replayed = httpx.get(f"{url}/readyz", timeout=5).json()["replayed"]
            if replayed != len(stored) - covered:
                result.violations.append(
                    f"run {index}: replayed {replayed} events, the journal held {len(stored)} "
                    f"of which a snapshot covered {covered}"
                )
            # An outside reader while the service writes (an operator's sqlite3 shell, a backup).
            if not stored.issubset(journal_keys(journal)):
                result.violations.append(f"run {index}: a live read of the journal misses stored events")
        streamer.done.wait(300)
        if streamer.error is not None:
            result.violations.append(f"run {index}: streamer failed: {streamer.error!r}")
            return
        keys = journal_keys(journal)
        if sorted(keys) != sorted(run.idempotency_keys()):
            missing = [key for key in run.idempotency_keys() if key not in set(keys)]
            example = f"{missing[0]} acked as {streamer.acks.get(missing[0])}" if missing else ""
            result.violations.append(
                f"run {index}: journal holds {len(keys)} events ({len(set(keys))} distinct), "
                f"expected each of {len(run.events)} once; missing e.g. {example}"
            )
        with httpx.Client(base_url=proc.url, timeout=30) as client:
            files = report_files(client, run.run_id)
            page = client.get(f"/v1/runs/{run.run_id}/page").json()
        agents = [{key: agent[key] for key in AGENT_KEYS} for agent in page.get("agents") or []]
        if agents != expected_agents(run.events):
            result.violations.append(f"run {index}: per-agent figures differ from the events applied once")
        expected = batch_files(run.run_dir)
        if files[0] != expected[0]:
            result.violations.append(f"run {index}: quality_summary.json differs from the batch check")
        if files[1] != expected[1]:
            result.violations.append(f"run {index}: rollout_verdicts.jsonl differs from the batch check")
        result.events_acked += len(streamer.acked)
        result.retried_batches += streamer.retried
        result.duplicate_acks += streamer.duplicates
        result.runs += 1
    finally:
        proc.stop()


def run_crash_trials(
    trials: int,
    workdir: Path,
    *,
    kills_per_run: int = 5,
    num_tasks: int = 40,
    seed: int = 1,
    launch: Launch = "exec",
    max_gap_s: float = 0.6,
    serve_args: tuple[str, ...] = (),
    orphan_grace_s: float = 3.0,
) -> CrashResult:
    """Stream generated runs and SIGKILL the service until ``trials`` kills hit a live stream.

    ``serve_args`` go to ``rollout-sidecar serve`` (e.g. ``("--snapshot-every-events", "7")``); processes the
    killed service leaves running ``orphan_grace_s`` after the kill are counted, then killed."""
    result = CrashResult()
    index = 0
    while result.trials < trials and index < trials * 3:
        kills = min(kills_per_run, trials - result.trials)
        _one_run(
            index,
            workdir,
            kills=kills,
            num_tasks=num_tasks,
            seed=seed,
            launch=launch,
            max_gap_s=max_gap_s,
            serve_args=serve_args,
            orphan_grace_s=orphan_grace_s,
            result=result,
        )
        index += 1
    return result
