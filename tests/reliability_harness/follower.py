"""Follower: ``rollout-sidecar follow`` over files another process mangles, SIGKILLed at random.

A writer process appends the run's lines in random pieces that cut lines anywhere (partial
writes), unlinks and recreates both files mid-run (a fresh run), truncates the rollouts file at
a random byte (resume repairing a tail, or cutting below what was already read) and appends
more. Meanwhile the follower process is SIGKILLed at random moments and restarted. At the end a
last follower drains the files and ends the run; the sidecar's report files must equal the
batch health check over the final rollouts file, byte for byte.
"""

from __future__ import annotations

import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from .file_writer import writer_argv
from .sidecar_process import REPO_ROOT, Launch, SidecarProcess
from .workload import batch_files, generate_run, report_files

__all__ = ["FollowerResult", "run_follower_trials"]


@dataclass
class FollowerResult:
    trials: int = 0
    follower_kills: int = 0
    partial_writes: int = 0
    recreations: int = 0
    truncations: int = 0
    final_lines: int = 0
    violations: list[str] = field(default_factory=list)


def _pieces(rng: random.Random, path: Path, data: bytes, ops: list[list[Any]], pause_s: float) -> int:
    """Write ``data`` in random pieces (cutting lines anywhere) with pauses; returns the piece count."""
    position = count = 0
    while position < len(data):
        size = rng.randint(1, 2500)
        ops.append(["write", str(path), data[position : position + size].hex()])
        ops.append(["sleep", rng.uniform(0, pause_s)])
        position += size
        count += 1
    return count


def _plan_writes(
    rng: random.Random, run_dir: Path, seed: int, result: FollowerResult, truncate: str
) -> list[list[Any]]:
    first = generate_run("a", run_dir, num_tasks=10, seed=seed, fault_rate=0.05)
    second = generate_run("b", run_dir, num_tasks=14, seed=seed + 1, fault_rate=0.05)
    main, failures = run_dir / "rollouts.jsonl", run_dir / "rollouts_failures.jsonl"
    ops: list[list[Any]] = []
    head = b"".join(first.main_lines)
    result.partial_writes += _pieces(rng, main, head, ops, 0.03)
    result.partial_writes += _pieces(rng, failures, b"".join(first.failure_lines), ops, 0.01)
    ops.append(["unlink", str(main), str(failures)])  # a fresh run replaces both files
    result.recreations += 1
    body = b"".join(second.main_lines)
    cut = rng.randint(len(body) // 3, 2 * len(body) // 3)
    result.partial_writes += _pieces(rng, main, body[:cut], ops, 0.03)
    result.partial_writes += _pieces(rng, failures, b"".join(second.failure_lines), ops, 0.01)
    ops.append(["sleep", 0.3])
    if truncate == "tail":  # NeMo Gym's resume repair: cut the unterminated last line, write on
        keep = body.rfind(b"\n", 0, cut) + 1
        ops.append(["truncate", str(main), keep])
        rest = body[keep:]
    else:  # cut anywhere (complete lines too), then append the rest: different bytes past the cut
        ops.append(["truncate", str(main), rng.randint(cut // 2, cut)])
        rest = body[cut:]
    result.truncations += 1
    result.partial_writes += _pieces(rng, main, rest, ops, 0.03)
    return ops


def _follow_argv(run_dir: Path, url: str, run_id: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "sidecar.cli", "follow", str(run_dir), "--sidecar", url,
            "--run-id", run_id, "--poll-interval", "0.05", *extra]  # fmt: skip


def _trial(
    index: int, workdir: Path, rng: random.Random, launch: Launch, truncate: str, result: FollowerResult
) -> None:
    base = workdir / f"follow-{index}"
    run_dir = base / "run"
    run_dir.mkdir(parents=True)
    ops_path = base / "ops.json"
    ops_path.write_bytes(orjson.dumps(_plan_writes(rng, run_dir, 900 + index, result, truncate)))
    run_id = f"followed-{index}"
    env = {"PYTHONPATH": str(REPO_ROOT)}
    with SidecarProcess(base / "journal.sqlite3", base / "sidecar.log", launch=launch) as url:
        writer = subprocess.Popen(writer_argv(ops_path))
        log = (base / "follower.log").open("ab")
        try:
            while writer.poll() is None:
                follower = subprocess.Popen(
                    _follow_argv(run_dir, url, run_id), cwd=REPO_ROOT, env=env, stdout=log, stderr=log
                )
                deadline = time.monotonic() + rng.uniform(0.3, 2.0)
                while time.monotonic() < deadline and writer.poll() is None:
                    time.sleep(0.02)
                follower.kill()
                follower.wait(10)
                result.follower_kills += 1
            if writer.wait(120) != 0:
                result.violations.append(f"trial {index}: the writer failed")
            final = subprocess.run(
                _follow_argv(run_dir, url, run_id, "--until-idle", "1.0"),
                cwd=REPO_ROOT,
                env=env,
                stdout=log,
                stderr=log,
                timeout=120,
                check=False,
            )
        finally:
            if writer.poll() is None:
                writer.kill()
                writer.wait(10)
            log.close()
        if final.returncode != 0:
            result.violations.append(f"trial {index}: the final follower exited {final.returncode}")
        with httpx.Client(base_url=url, timeout=30) as client:
            files = report_files(client, run_id)
    result.final_lines += (run_dir / "rollouts.jsonl").read_bytes().count(b"\n")
    if files != batch_files(run_dir):
        result.violations.append(f"trial {index}: report differs from the batch check over the final file")
    result.trials += 1


def run_follower_trials(
    trials: int, workdir: Path, *, truncate: str = "tail", seed: int = 6, launch: Launch = "exec"
) -> FollowerResult:
    """``truncate="tail"`` cuts only an unterminated last line (NeMo Gym's resume repair);
    ``"any"`` cuts at any byte, complete lines included."""
    if truncate not in ("tail", "any"):
        raise ValueError(f"truncate must be 'tail' or 'any', got {truncate!r}")
    rng = random.Random(seed)
    result = FollowerResult()
    for index in range(trials):
        _trial(index, workdir, rng, launch, truncate, result)
    return result
