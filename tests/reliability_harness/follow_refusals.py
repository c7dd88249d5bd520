"""The follower never drops a line: long lines, lines past every cap, refusals, no sidecar.

Each case runs the real ``rollout-sidecar follow --once`` (a child process) against a real
``rollout-sidecar serve``:

* ``long``: a line shorter than the sidecar's ``--body-cap`` whose JSON escaping would double it
  past the cap must get through (raw ``/lines`` body); the live report must equal the batch check.
* ``over cap``: a line longer than the sidecar's cap (a runaway generation) is skipped with one
  warning naming its size, reported ``record_unreadable`` in its place, and the follower goes on:
  it exits 0, checkpoints every line, and the report equals the batch check over the file with
  that line replaced by the unreadable placeholder the follower sends.
* ``wrong token``: the follower must exit non-zero with one line naming the refusal and checkpoint
  nothing; a rerun with the right token sends every record.
* ``unreachable``: against a closed port with ``--give-up-after``, the follower must say so on
  stderr at once and exit non-zero within the bound.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from sidecar.http.settings import TOKEN_ENV_VAR
from tests.reliability_harness.sidecar_process import REPO_ROOT, Launch, SidecarProcess
from tests.reliability_harness.workload import batch_files, generate_run, report_files

__all__ = ["FollowRefusalsResult", "padded_line", "run_follow_refusals"]


@dataclass
class FollowRefusalsResult:
    long_line_bytes: int = 0
    long_records: int = 0
    over_cap_exit: int | None = None
    over_cap_message: str = ""
    over_cap_records: int = 0
    wrong_token_exit: int | None = None
    wrong_token_message: str = ""
    token_rerun_records: int = 0
    unreachable_first_stderr_s: float | None = None
    unreachable_exit_s: float | None = None
    unreachable_exit: int | None = None
    violations: list[str] = field(default_factory=list)


def padded_line(line: bytes, size: int) -> bytes:
    """``line`` (a JSON object) with a ``padding`` string of quotes, ``size`` bytes in all: each
    quote is two bytes in the line and four once the line is escaped into a JSON string."""
    head = line.rstrip(b"\n")[:-1] + b',"padding":"'
    room = max(0, size - len(head) - 3)
    return head + b'\\"' * (room // 2) + b'"}\n'


def _follow(
    run_dir: Path, url: str, *extra: str, token: str | None = None
) -> tuple[int, str, float | None, float]:
    """Run ``follow --once``; ``(exit code, stderr, seconds to the first stderr line, seconds)``."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop(TOKEN_ENV_VAR, None)
    if token is not None:
        env[TOKEN_ENV_VAR] = token
    began = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-m", "sidecar.cli", "follow", str(run_dir), "--sidecar", url, "--once", *extra],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert child.stderr is not None
    first: float | None = None
    lines = []
    with child, child.stderr:
        for raw in child.stderr:
            if first is None:
                first = time.monotonic() - began
            lines.append(raw.decode("utf-8", "replace"))
        code = child.wait(timeout=120)
    return code, "".join(lines), first, time.monotonic() - began


def _records(client: httpx.Client, run_id: str) -> int:
    response = client.get("/report/verdicts", params={"run_id": run_id})
    return response.text.count("\n") if response.status_code == 200 else -1


def _checkpoint_line(run_dir: Path) -> int:
    states = list(run_dir.glob(".rollout_sidecar_follow.*.json"))
    if not states:
        return 0
    return int(json.loads(states[0].read_bytes())["files"]["rollouts"]["line_number"])


def _run_dir(workdir: Path, name: str, lines: list[bytes]) -> Path:
    run_dir = workdir / name
    run_dir.mkdir(parents=True)
    (run_dir / "rollouts.jsonl").write_bytes(b"".join(lines))
    return run_dir


def _same_as_batch(url: str, run_dir: Path, result: FollowRefusalsResult, case: str) -> int:
    with httpx.Client(base_url=url, timeout=60) as client:
        records = _records(client, run_dir.name)
        if report_files(client, run_dir.name) != batch_files(run_dir):
            result.violations.append(f"{case}: live report != batch check")
    return records


def run_follow_refusals(
    workdir: Path, *, launch: Launch = "exec", line_bytes: int = 3 << 20, body_cap: int = 4 << 20
) -> FollowRefusalsResult:
    """See the module docstring. ``line_bytes`` < ``body_cap`` < 2 x ``line_bytes``."""
    result = FollowRefusalsResult(long_line_bytes=line_bytes)
    rows = generate_run("rows", workdir / "gen", num_tasks=6, fault_rate=0.0, failure_rate=0.0).main_lines
    sidecar = SidecarProcess(
        workdir / "journal.sqlite3",
        workdir / "sidecar.log",
        launch=launch,
        extra_args=["--body-cap", str(body_cap)],
    )
    url = sidecar.start()
    try:
        long_dir = _run_dir(workdir, "long", [rows[0], rows[1], padded_line(rows[2], line_bytes), rows[3]])
        code, stderr, _, _ = _follow(long_dir, url)
        if code != 0:
            result.violations.append(f"long: follower exited {code}: {stderr[-300:]}")
        result.long_records = _same_as_batch(url, long_dir, result, "long")
        if result.long_records != 4:
            result.violations.append(f"long: {result.long_records} records live, 4 in the file")

        over_line = padded_line(rows[2], body_cap + 4096)
        over_dir = _run_dir(workdir, "over", [rows[0], rows[1], over_line, rows[3]])
        code, stderr, _, _ = _follow(over_dir, url)
        result.over_cap_exit, result.over_cap_message = (
            code,
            stderr.strip().splitlines()[-1] if stderr else "",
        )
        if code != 0 or "record_unreadable" not in stderr:
            result.violations.append(f"over cap: exit {code}, message {stderr[-300:]!r}")
        if _checkpoint_line(over_dir) != 4:  # the skipped line is checkpointed like any other
            result.violations.append(f"over cap: checkpoint at line {_checkpoint_line(over_dir)}, not 4")
        size = len(over_line.rstrip(b"\n"))
        placeholder = json.dumps(f"rollout-sidecar follow: line 3 of {size} bytes, over the cap, not read")
        with httpx.Client(base_url=url, timeout=60) as client:
            result.over_cap_records = _records(client, "over")
            live = report_files(client, "over")
        unreadable = placeholder.encode() + b"\n"  # the batch check of the file as the sidecar saw it
        (over_dir / "rollouts.jsonl").write_bytes(b"".join([rows[0], rows[1], unreadable, rows[3]]))
        if live != batch_files(over_dir):
            result.violations.append("over cap: live report != batch check with the line unreadable")
    finally:
        sidecar.stop()

    authed = SidecarProcess(
        workdir / "auth.sqlite3", workdir / "auth.log", launch=launch, env={TOKEN_ENV_VAR: "right-token"}
    )
    url = authed.start()
    try:
        token_dir = _run_dir(workdir, "token", rows[:6])
        code, stderr, _, _ = _follow(token_dir, url, token="wrong-token")
        result.wrong_token_exit = code
        result.wrong_token_message = stderr.strip().splitlines()[-1] if stderr else ""
        one_line = len(stderr.strip().splitlines()) == 1
        if code == 0 or not one_line or "401" not in result.wrong_token_message or "token" not in stderr:
            result.violations.append(f"wrong token: exit {code}, message {stderr[-300:]!r}")
        if _checkpoint_line(token_dir) != 0:
            result.violations.append(f"wrong token: checkpoint moved to line {_checkpoint_line(token_dir)}")
        code, stderr, _, _ = _follow(token_dir, url, token="right-token")
        with httpx.Client(
            base_url=url, timeout=60, headers={"Authorization": "Bearer right-token"}
        ) as client:
            result.token_rerun_records = _records(client, "token")
            if report_files(client, "token") != batch_files(token_dir):
                result.violations.append("wrong token: report after the rerun != batch check")
        if code != 0 or result.token_rerun_records != 6:
            result.violations.append(
                f"wrong token: rerun exited {code} with {result.token_rerun_records}/6 records"
            )
    finally:
        authed.stop()

    closed = _run_dir(workdir, "closed", rows[:2])
    code, stderr, first, took = _follow(closed, "http://127.0.0.1:9", "--give-up-after", "2")
    result.unreachable_exit, result.unreachable_first_stderr_s, result.unreachable_exit_s = code, first, took
    if code == 0 or "not answering" not in stderr or first is None or took > 15:
        result.violations.append(f"unreachable: exit {code} after {took:.1f} s, stderr {stderr[-300:]!r}")
    return result
