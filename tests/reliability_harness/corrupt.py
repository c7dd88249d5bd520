"""Torn and corrupt state: the service starts and recovers what is valid, or refuses clearly.

* torn WAL: the last write of the journal is cut short (the WAL truncated at a random byte
  inside the frames of the last batch, as a crash before that batch's fsync leaves it): the
  service must start, keep every event acknowledged before that batch, and hold the last batch
  entirely or not at all;
* truncated database file (after a clean shutdown folded the WAL into it): refuse with a clear
  message (exit 2, the journal named), or start holding every event, never fewer: the journal
  still holds every key and the report (rebuilt from the shutdown snapshot or replayed) equals
  the batch check over the whole run;
* a journal of another schema (older or newer), a foreign SQLite database
  and files that are not SQLite are refused with a message and left byte-for-byte untouched.
"""

from __future__ import annotations

import os
import random
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .sidecar_process import Launch, SidecarProcess, StartFailed
from .workload import GeneratedRun, batch_files, generate_run, journal_keys, report_files

__all__ = ["CorruptResult", "run_corrupt_trials", "run_schema_cases"]


@dataclass
class CorruptResult:
    torn_trials: int = 0
    torn_last_batch_kept: int = 0
    torn_last_batch_dropped: int = 0
    truncated_trials: int = 0
    truncated_refused: int = 0
    truncated_started_complete: int = 0
    schema_cases: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


def _post(url: str, run: GeneratedRun, events: list[dict[str, object]], batch: int = 6) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        for start in range(0, len(events), batch):
            response = client.post(f"/v1/runs/{run.run_id}/events", json=events[start : start + batch])
            response.raise_for_status()


def _refusal_is_clear(proc: SidecarProcess, code: int, journal: Path) -> str | None:
    log = proc.log_since()
    if code != 2:
        return f"exit code {code}, expected 2"
    if "rollout-sidecar serve: journal" not in log or str(journal) not in log:
        return f"refusal does not name the journal: {log[-300:]!r}"
    return None


def _torn_trial(index: int, workdir: Path, rng: random.Random, launch: Launch, result: CorruptResult) -> None:
    base = workdir / f"torn-{index}"
    run = generate_run(f"torn-{index}", base / "run", num_tasks=12, seed=100 + index)
    journal = base / "journal.sqlite3"
    wal = journal.with_name(journal.name + "-wal")
    proc = SidecarProcess(journal, base / "sidecar.log", launch=launch)
    url = proc.start()
    split = rng.randint(2, len(run.events) - 2)
    last = run.events[split : split + rng.randint(1, 6)]
    _post(url, run, run.events[:split])
    before = wal.stat().st_size
    _post(url, run, last, batch=len(last))
    after = wal.stat().st_size
    proc.kill()
    if after <= before:
        result.violations.append(f"torn {index}: the last batch did not grow the WAL ({before} -> {after})")
        return
    cut = rng.randint(before, after - 1)
    os.truncate(wal, cut)
    result.torn_trials += 1
    acked_before = run.idempotency_keys(run.events[:split])
    last_keys = run.idempotency_keys(last)
    try:
        url = proc.start()
    except StartFailed as exc:
        result.violations.append(f"torn {index}: service refused a journal with a torn WAL tail: {exc}")
        return
    try:
        stored = journal_keys(journal)
        if stored[: len(acked_before)] != acked_before:
            result.violations.append(f"torn {index}: events acknowledged before the torn write were lost")
        tail = stored[len(acked_before) :]
        if tail == last_keys:
            result.torn_last_batch_kept += 1
            kept = run.events[: split + len(last)]
        elif not tail:
            result.torn_last_batch_dropped += 1
            kept = run.events[:split]
        else:
            result.violations.append(
                f"torn {index}: the torn batch was stored in part ({len(tail)}/{len(last)})"
            )
            return
        _check_report(url, run, kept, result, f"torn {index}")
    finally:
        proc.stop()


def _check_report(
    url: str, run: GeneratedRun, kept: list[dict[str, object]], result: CorruptResult, label: str
) -> None:
    """The recovered run's report equals the batch check over the rows it holds (a prefix of the
    run, so its line numbers and source path are those of the full run)."""
    completions = sum(event["kind"] == "completed" for event in kept)
    prefix = GeneratedRun(run.run_id, run.run_dir, main_lines=run.main_lines[:completions])
    prefix.write_files()
    _post(url, run, [{"kind": "run_ended"}])
    with httpx.Client(base_url=url, timeout=30) as client:
        files = report_files(client, run.run_id)
    if files != batch_files(run.run_dir):
        result.violations.append(f"{label}: recovered report differs from the batch check over the kept rows")


def _truncated_trial(
    index: int, workdir: Path, rng: random.Random, launch: Launch, result: CorruptResult
) -> None:
    base = workdir / f"trunc-{index}"
    run = generate_run(f"trunc-{index}", base / "run", num_tasks=12, seed=200 + index)
    journal = base / "journal.sqlite3"
    proc = SidecarProcess(journal, base / "sidecar.log", launch=launch)
    url = proc.start()
    _post(url, run, run.events)
    proc.stop()  # clean: the WAL is folded into the database file
    expected = journal_keys(journal)
    size = journal.stat().st_size
    cut = rng.randint(1, size - 1)
    os.truncate(journal, cut)
    result.truncated_trials += 1
    proc.spawn()
    try:
        url = proc.wait_ready(30)
    except StartFailed as exc:
        problem = _refusal_is_clear(proc, exc.returncode if exc.returncode is not None else -1, journal)
        if problem:
            result.violations.append(f"truncated {index} at {cut}/{size}: {problem}")
        else:
            result.truncated_refused += 1
        return
    label = f"truncated {index} at {cut}/{size}"
    try:
        problem = _state_problem(url, run)
    finally:
        proc.stop()
    try:
        stored = journal_keys(journal)
    except sqlite3.DatabaseError as exc:
        problem = problem or f"started, but its journal is unreadable afterwards: {exc}"
        stored = expected
    if stored != expected:
        problem = f"started with {len(stored)} of {len(expected)} journaled events"
    if problem:
        result.violations.append(f"{label}: {problem}")
    else:
        result.truncated_started_complete += 1


def _state_problem(url: str, run: GeneratedRun) -> str | None:
    """What differs between the started service's report and the batch check over the whole run
    (the state may come from the shutdown snapshot, nothing replayed, or from the journal)."""
    run.write_files()
    with httpx.Client(base_url=url, timeout=30) as client:
        try:
            files = report_files(client, run.run_id)
        except httpx.HTTPStatusError as exc:
            return f"started without the run: {exc.response.status_code} {exc.response.text[:200]}"
    if files != batch_files(run.run_dir):
        return "started, but its report differs from the batch check"
    return None


def run_corrupt_trials(
    trials: int, workdir: Path, *, seed: int = 3, launch: Launch = "exec"
) -> CorruptResult:
    """``trials`` torn-WAL trials and ``trials`` truncated-database trials."""
    rng = random.Random(seed)
    result = CorruptResult()
    for index in range(trials):
        _torn_trial(index, workdir, rng, launch, result)
        _truncated_trial(index, workdir, rng, launch, result)
    return result


def _make_journal(path: Path, workdir: Path, launch: Launch) -> list[str]:
    run = generate_run("schema", workdir / "schema-run", num_tasks=6, seed=5)
    proc = SidecarProcess(path, workdir / "schema.log", launch=launch)
    url = proc.start()
    _post(url, run, run.events)
    proc.stop()
    return journal_keys(path)


def run_schema_cases(workdir: Path, *, launch: Launch = "exec") -> CorruptResult:
    """Another schema (older or newer), foreign SQLite, not SQLite: refused, untouched."""
    result = CorruptResult()
    template = workdir / "template.sqlite3"
    _make_journal(template, workdir, launch)

    cases: dict[str, bytes] = {}
    older = workdir / "older.sqlite3"
    older.write_bytes(template.read_bytes())
    with sqlite3.connect(older) as conn:
        conn.execute("PRAGMA user_version = 1")
    conn.close()
    cases["older schema (v1)"] = older.read_bytes()
    newer = workdir / "newer.sqlite3"
    newer.write_bytes(template.read_bytes())
    with sqlite3.connect(newer) as conn:
        conn.execute("PRAGMA user_version = 99")
    conn.close()
    cases["newer schema (v99)"] = newer.read_bytes()
    foreign = workdir / "foreign.sqlite3"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE notes (body TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.close()
    cases["foreign SQLite database"] = foreign.read_bytes()
    cases["JSON text"] = b'{"not": "a journal"}\n'
    cases["random bytes"] = random.Random(9).randbytes(8192)
    cases["SQLite header, garbage pages"] = template.read_bytes()[:100] + random.Random(4).randbytes(8092)
    for name, content in cases.items():
        target = workdir / f"case-{len(result.schema_cases)}" / "journal.sqlite3"
        target.parent.mkdir(parents=True)
        target.write_bytes(content)
        proc = SidecarProcess(target, target.parent / "sidecar.log", launch=launch)
        code = proc.run_to_exit(30)
        problem = _refusal_is_clear(proc, code, target)
        if problem:
            result.violations.append(f"{name}: {problem}")
        elif target.read_bytes() != content:
            result.violations.append(f"{name}: refused but the file was modified")
        else:
            message = proc.log_since().strip().splitlines()[-1]
            result.schema_cases[name] = "refused: " + message.split(": ", 1)[1][:160]
    return result
