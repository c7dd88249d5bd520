"""``rollout-sidecar attach -- ng_collect_rollouts ...``: NeMo Gym's real console script, observed live.

Runs where NeMo Gym is installed beside this project (``.ci/nemo_gym.sh``); skipped elsewhere. The job
is NeMo Gym's own CLI against ``agent_server.GymServers`` (seeded durations, failures of both kinds, a
dispatch budget that drains part of the run, the adaptive drain margin); the reference for its reports
is NeMo Gym's own ``gym eval health-check`` over the files the job wrote.
"""

from __future__ import annotations

import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

pytest.importorskip(
    "nemo_gym.rollout_collection",
    reason="NeMo Gym is not installed here; .ci/nemo_gym.sh runs this in a venv beside it",
)

from .agent_server import GymServers, collect_command, write_inputs

BIN = Path(sys.executable).parent
REPORTS = ("quality_summary.json", "rollout_verdicts.jsonl")
TASKS, REPEATS, SEED, SCALE = 16, 2, 7, 300.0
#: Short enough that NeMo Gym drains about half of the 32 rollouts at the adaptive (p75) margin.
BUDGET_S = 2.0
_END = re.compile(
    r"run (\S+): (\d+) events delivered to \S+, 0 refused, (\d+) not delivered; "
    r"drain margin (\S+) s \((.*) samples\)"
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Sidecar:
    """The installed ``rollout-sidecar serve`` on a fixed port, which a test may kill and restart."""

    def __init__(self, where: Path) -> None:
        self.port, self.where = _free_port(), where
        self.url = f"http://127.0.0.1:{self.port}"
        self.child: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [str(BIN / "rollout-sidecar"), "serve", "--port", str(self.port)]
        log = (self.where / "sidecar.log").open("ab")
        argv += ["--journal", str(self.where / "journal.sqlite")]
        self.child = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/readyz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            assert self.child.poll() is None and time.monotonic() < deadline, (
                self.where / "sidecar.log"
            ).read_text()
            time.sleep(0.05)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        assert self.child is not None
        self.child.send_signal(sig)
        self.child.wait(30)

    def get(self, path: str, **params: Any) -> Any:
        return httpx.get(f"{self.url}{path}", params=params, timeout=30).json()


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[_Sidecar]:
    server = _Sidecar(tmp_path)
    server.start()
    yield server
    if server.child is not None and server.child.poll() is None:
        server.stop()


@pytest.fixture
def agent() -> Iterator[GymServers]:
    servers = GymServers(TASKS, REPEATS, SEED, scale=SCALE)
    servers.start()
    yield servers
    servers.stop()


def _job(
    agent: GymServers, where: Path, attach: list[str] | None, *, budget: float | None = BUDGET_S, job: int = 0
) -> list[str]:
    """The job's argv, under ``rollout-sidecar attach ATTACH --`` unless ``attach`` is ``None``."""
    where.mkdir(parents=True, exist_ok=True)
    options = {} if budget is None else {"dispatch_budget_s": budget}
    inputs = write_inputs(where / "in.jsonl", TASKS, job)
    command = collect_command(agent.port, inputs, where / "rollouts.jsonl", REPEATS, **options)
    return command if attach is None else [str(BIN / "rollout-sidecar"), "attach", *attach, "--", *command]


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The job from ``cwd`` (Hydra writes ``outputs/`` where a job starts: never into the checkout)."""
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def _end_line(done: subprocess.CompletedProcess[str]) -> re.Match[str]:
    found = _END.search(done.stderr)
    assert found is not None, done.stderr[-3000:]
    return found


def _nemo_gym_reports(where: Path, tmp: Path) -> dict[str, bytes]:
    """``gym eval health-check`` over a copy of the files the job wrote."""
    copy = tmp / "theirs"
    copy.mkdir()
    for name in ("rollouts.jsonl", "rollouts_failures.jsonl", "rollouts_materialized_inputs.jsonl"):
        shutil.copy(where / name, copy / name)
    subprocess.run([str(BIN / "gym"), "eval", "health-check", str(copy)], capture_output=True, check=False)
    return {name: (copy / name).read_bytes() for name in REPORTS}


def _wait(condition: Callable[[], object], job: subprocess.Popen[str]) -> None:
    """Until ``condition`` holds, while the job runs (a failure names which)."""
    deadline = time.monotonic() + 120
    while not condition():
        assert job.poll() is None and time.monotonic() < deadline, "the job ended (or 120 s passed) first"
        time.sleep(0.02)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _check_run(
    where: Path, report_dir: Path, tmp: Path, done: subprocess.CompletedProcess[str]
) -> dict[str, Any]:
    """Reports byte-identical to NeMo Gym's, and the accounting equal to what the job wrote and printed."""
    theirs = _nemo_gym_reports(where, tmp)
    for name in REPORTS:
        assert (report_dir / name).read_bytes() == theirs[name], name
    report = orjson.loads((report_dir / "report.json").read_bytes())
    accounting = report["accounting"]
    drained = re.search(r"Drained \(not dispatched, no time left in the budget\): (\d+)\.", done.stdout)
    planned = len(_lines(where / "rollouts_materialized_inputs.jsonl"))
    written, failed = len(_lines(where / "rollouts.jsonl")), len(_lines(where / "rollouts_failures.jsonl"))
    assert accounting["succeeded"] == written and accounting["failed"] == failed
    assert accounting["drained"] == (int(drained.group(1)) if drained else 0) == planned - written - failed
    assert accounting["expected"] == planned and accounting["missing"] == 0
    assert report["inflight_at_end"]["count"] == 0
    end = _end_line(done)
    assert end.group(3) == "0" and float(end.group(4)) == report["latency"]["drain_margin"]
    return report


def test_attached_run_is_observed_exactly(agent: GymServers, sidecar: _Sidecar, tmp_path: Path) -> None:
    where = tmp_path / "job"
    done = _run(_job(agent, where, ["--sidecar", sidecar.url, "--run-id", "gym-live"]), tmp_path)
    assert "rollout-sidecar attach: run gym-live: " + sidecar.url + "/runs/gym-live" in done.stderr
    out = tmp_path / "report"
    subprocess.run(
        [
            str(BIN / "rollout-sidecar"),
            "report",
            "--sidecar",
            sidecar.url,
            "--run-id",
            "gym-live",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    report = _check_run(where, out, tmp_path, done)
    assert 0 < report["accounting"]["drained"] < TASKS * REPEATS, "the budget should drain part of the run"
    # Every rollout NeMo Gym dispatched was seen to start: the run's last timeline point.
    series = sidecar.get("/v1/runs/gym-live/timeline")["series"]
    assert sum(series["started"]) == TASKS * REPEATS - report["accounting"]["drained"]
    assert series["in_flight"][-1] == 0
    assert sidecar.get("/v1/runs/gym-live/inflight")["count"] == 0
    margin = sidecar.get("/drain_margin", run_id="gym-live")
    assert (
        margin["drain_margin"] == float(_end_line(done).group(4))
        and margin["drained"] == report["accounting"]["drained"]
    )


def test_own_sidecar_writes_reports_beside_the_output(agent: GymServers, tmp_path: Path) -> None:
    where = tmp_path / "job"
    done = _run(_job(agent, where, []), tmp_path)
    beside = where / "rollouts.jsonl.sidecar"
    assert re.search(r"run (rollouts-\d{8}T\d{6}): http://127\.0\.0\.1:\d+/runs/\1\n", done.stderr), (
        done.stderr
    )
    assert (beside / "journal.sqlite").is_file() and (beside / "page.html").stat().st_size > 10_000
    _check_run(where, beside, tmp_path, done)


def _comparable(path: Path) -> list[bytes]:
    """The job's rows without what NeMo Gym measures itself (its ``ng_perf`` latency), in identity order."""
    rows = _lines(path)
    for row in rows:
        if isinstance(row.get("ng_perf"), dict):
            row["ng_perf"].pop("total_latency_ms", None)
    return sorted(orjson.dumps(row, option=orjson.OPT_SORT_KEYS) for row in rows)


def test_without_a_sidecar_the_job_is_unchanged(agent: GymServers, tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{_free_port()}"
    plain = _run(_job(agent, tmp_path / "plain", None, budget=None), tmp_path)
    attached = _run(_job(agent, tmp_path / "attached", ["--sidecar", closed], budget=None), tmp_path)
    for name in ("rollouts.jsonl", "rollouts_failures.jsonl", "rollouts_materialized_inputs.jsonl"):
        assert _comparable(tmp_path / "attached" / name) == _comparable(tmp_path / "plain" / name), name
    assert "Per-task latency over" in attached.stdout and plain.returncode == attached.returncode == 0
    end = _end_line(attached)
    assert end.group(2) == "0" and int(end.group(3)) > 0, "nothing could be delivered"


def test_sidecar_killed_and_restarted_mid_run(agent: GymServers, sidecar: _Sidecar, tmp_path: Path) -> None:
    where = tmp_path / "job"
    job = subprocess.Popen(
        _job(agent, where, ["--sidecar", sidecar.url, "--run-id", "gym-restart"], budget=None),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
    )

    def written() -> int:
        rows = where / "rollouts.jsonl"
        return rows.read_bytes().count(b"\n") if rows.exists() else 0

    def succeeded() -> int:
        report = sidecar.get("/report", run_id="gym-restart")
        return int(report.get("accounting", {}).get("succeeded", 0))

    _wait(lambda: succeeded() >= 3, job)
    sidecar.stop(signal.SIGKILL)
    before = written()
    _wait(lambda: written() >= before + 2, job)  # completions the client now holds for later
    agent.replying.clear()  # the job waits on its agent meanwhile (it only sees slower rollouts)
    sidecar.start()  # the same journal: what it acknowledged is there; the client re-sends the rest
    _wait(lambda: succeeded() >= written() - 1, job)  # (one row is sent when the next one ends)
    agent.replying.set()
    stdout, stderr = job.communicate(timeout=300)
    assert job.returncode == 0, stderr[-3000:]
    out = tmp_path / "report"
    subprocess.run(
        [
            str(BIN / "rollout-sidecar"),
            "report",
            "--sidecar",
            sidecar.url,
            "--run-id",
            "gym-restart",
            "--out",
            str(out),
        ],
        check=True,
        capture_output=True,
    )
    _check_run(where, out, tmp_path, subprocess.CompletedProcess(job.args, 0, stdout, stderr))


def test_two_pooled_processes_answer_the_pooled_p75(sidecar: _Sidecar, tmp_path: Path) -> None:
    agent = GymServers(TASKS, REPEATS, SEED, scale=SCALE, jobs=2)
    agent.start()
    try:
        attach = ["--sidecar", sidecar.url, "--run-id", "pooled", "--pooled"]
        argvs = [_job(agent, tmp_path / f"job{i}", attach, budget=None, job=i) for i in (0, 1)]
        jobs = [
            subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for argv in argvs
        ]
        outputs = [job.communicate(timeout=300) for job in jobs]
    finally:
        agent.stop()
    assert [job.returncode for job in jobs] == [0, 0], [err[-2000:] for _, err in outputs]
    ends = [_end_line(subprocess.CompletedProcess([], 0, out, err)) for out, err in outputs]
    own = [int(re.search(r"over (\d+) completed", out).group(1)) for out, _ in outputs]  # type: ignore[union-attr]
    final = sidecar.get("/drain_margin", run_id="pooled")
    assert final["samples"] == sum(own)
    pooled = [int(end.group(5).removeprefix("pooled over ")) for end in ends]
    # Each answered from the run's pool, with the other's samples in it; the last to end, the whole pool.
    assert all(seen > mine for seen, mine in zip(pooled, own, strict=True)), (pooled, own)
    last = [end for end, seen in zip(ends, pooled, strict=True) if seen == final["samples"]]
    assert last and all(float(end.group(4)) == final["drain_margin"] for end in last)
