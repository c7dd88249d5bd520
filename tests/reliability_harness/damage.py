"""Damage to one file of the state, then a restart of the real service: whole or refused.

The state of a run is built once (half the run posted, a graceful stop that snapshots and folds
the WAL into the database file, the other half posted with a snapshot every few events, then a
SIGKILL): its two files, the SQLite journal and its WAL, then hold records, two snapshots and
closed groups. Each trial copies it, damages one file (one bit flipped, or the file cut short, at
a seeded random offset) and starts ``rollout-sidecar serve`` on it. The
promise: either the service starts, the journal's keys are a prefix of the run's acknowledged
events with no hole, and the report equals the batch check over exactly those rows; or the
start is refused with exit code 2 and one line on stderr naming what was kept, never a service
answering 503 for ever.
"""

from __future__ import annotations

import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from sidecar.journal import Journal

from .corrupt import _post
from .sidecar_process import Launch, SidecarProcess, StartFailed
from .workload import GeneratedRun, batch_files, generate_run, journal_keys, report_files

__all__ = [
    "DAMAGES",
    "STATE_FILES",
    "DamageResult",
    "DamagedState",
    "build_damage_state",
    "damage_trial",
    "run_damage_trials",
    "unrecoverable_trial",
]

STATE_FILES = ("journal", "wal")
DAMAGES = ("flip", "truncate")
_ARGS = ("--snapshot-every-events", "10", "--snapshot-keep", "2", "--snapshot-every-seconds", "0")


@dataclass
class DamagedState:
    """The template state: its directory (journal inside) and the run it holds (all but ``run_ended``)."""

    directory: Path
    run: GeneratedRun
    posted: int


@dataclass
class DamageResult:
    outcomes: dict[str, str] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)


def _journal(directory: Path) -> Path:
    return directory / "journal.sqlite3"


def _file(directory: Path, which: str) -> Path:
    journal = _journal(directory)
    return journal if which == "journal" else journal.with_name(journal.name + "-wal")


def build_damage_state(workdir: Path, *, launch: Launch = "fork", num_tasks: int = 40) -> DamagedState:
    """Every file of the state present and non-empty (asserted), the service killed."""
    directory = workdir / "template"
    run = generate_run("damage", workdir / "run", num_tasks=num_tasks, seed=41)
    events = run.events[:-1]  # run_ended is posted after the restart, by the check
    half = len(events) // 2
    proc = SidecarProcess(_journal(directory), workdir / "template.log", launch=launch, extra_args=_ARGS)
    url = proc.start()
    _post(url, run, events[:half])
    proc.stop()  # a snapshot, the WAL folded into the database file
    url = proc.start()
    _post(url, run, events[half:])
    time.sleep(0.5)  # let the last scheduled snapshot finish: two on disk, a tail after the newest
    proc.kill()
    for which in STATE_FILES:
        path = _file(directory, which)
        if not path.exists() or path.stat().st_size == 0:
            raise AssertionError(f"the template state has no {which} ({path})")
    probe = workdir / "probe"  # a copy: closing the last connection would fold the template's WAL
    shutil.copytree(directory, probe)
    if len(list(Journal(_journal(probe)).snapshots())) < 2:
        raise AssertionError("the template state has fewer than two snapshots")
    return DamagedState(directory, run, len(events))


def _damage(path: Path, damage: str, rng: random.Random) -> str:
    data = bytearray(path.read_bytes())
    at = rng.randrange(len(data))
    if damage == "truncate":
        path.write_bytes(bytes(data[:at]))
        return f"cut to {at} of {len(data)} bytes"
    bit = rng.randrange(8)
    data[at] ^= 1 << bit
    path.write_bytes(bytes(data))
    return f"bit {bit} of byte {at} of {len(data)} flipped"


def damage_trial(
    state: DamagedState, workdir: Path, which: str, damage: str, seed: int, *, launch: Launch = "fork"
) -> DamageResult:
    """One damaged copy of ``state``, restarted and checked (see the module's promise)."""
    result = DamageResult()
    directory = workdir / f"{which}-{damage}-{seed}"
    shutil.copytree(state.directory, directory)
    target = _file(directory, which)
    what = _damage(target, damage, random.Random(f"{which}/{damage}/{seed}"))
    label = f"{which} {damage} (seed {seed}: {what})"
    proc = SidecarProcess(_journal(directory), directory / "sidecar.log", launch=launch, extra_args=_ARGS)
    proc.spawn()
    try:
        url = proc.wait_ready(60)
    except StartFailed as exc:
        problem = _refusal_problem(proc, exc)
        if problem:
            result.violations.append(f"{label}: {problem}")
        else:
            result.outcomes[label] = "refused: " + proc.log_since().strip().splitlines()[-1][:300]
        return result
    try:
        _check_started(url, state, directory, label, result)
    finally:
        proc.stop()
    return result


def _refusal_problem(proc: SidecarProcess, exc: StartFailed) -> str | None:
    """A refusal must be exit 2 and one last line naming the cause, never advice to restore a
    file the start itself moved away."""
    if exc.returncode is None:
        return f"neither ready nor refused: {exc.log_tail[-500:]!r}"
    if exc.returncode != 2:
        return f"exit code {exc.returncode}, expected 2: {exc.log_tail[-500:]!r}"
    last = proc.log_since().strip().splitlines()[-1]
    if not last.startswith("rollout-sidecar serve: "):
        return f"the refusal's last line is not the reason: {last[:300]!r}"
    if "restore the snapshot" in last:
        return f"the refusal tells to restore files the start moved away: {last[:300]!r}"
    return None


def _log_facts(directory: Path) -> tuple[int, set[int]]:
    """From the start's log: the seq of the snapshot it loaded (0: none) and the seqs of the
    journal records it skipped as damaged."""
    seq, damaged = 0, set()
    for line in (directory / "sidecar.log").read_text(errors="replace").splitlines():
        if '"snapshot loaded"' in line:
            seq = int(orjson.loads(line)["seq"])
        elif '"journal record damaged, skipped"' in line:
            damaged.add(int(orjson.loads(line)["seq"]))
    return seq, damaged


def _check_started(url: str, state: DamagedState, directory: Path, label: str, result: DamageResult) -> None:
    run = state.run
    keys = [key for key in journal_keys(_journal(directory)) if not key.startswith("~lost|")]
    expected = run.idempotency_keys(run.events[: state.posted])
    if keys != expected[: len(keys)]:
        result.violations.append(f"{label}: the journal's keys are not a prefix of the acknowledged events")
        return
    # Records the journal lost (a damaged WAL) whose effect a snapshot still holds count as kept:
    # seq N is the run's N-th event (one run, posted in order, no duplicates). A record whose CRC
    # failed (logged with its seq) is the one record its damage costs.
    loaded, damaged = _log_facts(directory)
    held = max(len(keys), loaded)
    if held > state.posted:
        result.violations.append(f"{label}: a snapshot past the last acknowledged event ({held})")
        return
    kept = [event for seq, event in enumerate(run.events[:held], start=1) if seq not in damaged]
    problem = _report_problem(url, run, kept)
    if problem:
        result.violations.append(f"{label}: {problem}")
        return
    with httpx.Client(base_url=url, timeout=30) as client:
        ready = client.get("/readyz").json()
    result.outcomes[label] = (
        f"started with {len(kept)} of {state.posted} events (journal {len(keys)}, "
        f"{len(damaged)} damaged skipped, {ready.get('replayed')} replayed)"
    )


def _report_problem(url: str, run: GeneratedRun, kept: list[dict[str, Any]]) -> str | None:
    """The report after ``run_ended`` against the batch check over exactly ``kept``'s rows (each
    ``completed`` event is one line of the run's main file, in order)."""
    lines = iter(run.main_lines)
    rows = [next(lines) if event["kind"] == "completed" else None for event in run.events]
    kept_ids = {id(event) for event in kept}
    main = [
        row for event, row in zip(run.events, rows, strict=True) if row is not None and id(event) in kept_ids
    ]
    GeneratedRun(run.run_id, run.run_dir, main_lines=main).write_files()
    _post(url, run, [{"kind": "run_ended"}])
    with httpx.Client(base_url=url, timeout=30) as client:
        files = report_files(client, run.run_id)
    if files != batch_files(run.run_dir):
        return f"the report differs from the batch check over the {len(main)} rows kept"
    return None


def unrecoverable_trial(state: DamagedState, workdir: Path, *, launch: Launch = "fork") -> DamageResult:
    """A journal whose first page is overwritten is no SQLite database any more: the start must
    exit 2 by itself with one line naming the file (never serve 503 for ever), and leave it as it was."""
    result = DamageResult()
    directory = workdir / "unrecoverable"
    shutil.copytree(state.directory, directory)
    path = _journal(directory)
    data = bytearray(path.read_bytes())
    data[:100] = b"\x00" * 100
    path.write_bytes(bytes(data))
    proc = SidecarProcess(path, directory / "sidecar.log", launch=launch, extra_args=_ARGS)
    code = proc.run_to_exit(60)
    last = proc.log_since().strip().splitlines()[-1]
    problem = _refusal_problem(proc, StartFailed("", returncode=code, log_tail=last))
    if problem:
        result.violations.append(f"unrecoverable: {problem}")
    elif str(path) not in last or path.read_bytes() != bytes(data):
        result.violations.append(
            f"unrecoverable: the refusal does not name the journal, or it changed: {last!r}"
        )
    else:
        result.outcomes["unrecoverable"] = last
    return result


def run_damage_trials(workdir: Path, *, seeds: range = range(1, 6), launch: Launch = "exec") -> DamageResult:
    """Every file x every damage x ``seeds``, plus the unrecoverable trial, on one built state."""
    state = build_damage_state(workdir, launch=launch)
    total = DamageResult()
    for which in STATE_FILES:
        for damage in DAMAGES:
            for seed in seeds:
                one = damage_trial(state, workdir, which, damage, seed, launch=launch)
                total.outcomes.update(one.outcomes)
                total.violations += one.violations
    last = unrecoverable_trial(state, workdir, launch=launch)
    total.outcomes.update(last.outcomes)
    total.violations += last.violations
    return total
