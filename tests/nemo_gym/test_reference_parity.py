"""Our reports and ``ng_perf`` against NeMo Gym 0.7.0 itself, on fault-heavy generated runs.

Runs where NeMo Gym is installed beside this project (``.ci/nemo_gym.sh``); skipped elsewhere. The
reference is the installed ``gym eval health-check`` and NeMo Gym's own ``ng_perf`` builder, called as
black boxes; ours is the installed ``rollout-sidecar health-check`` and ``build_ng_perf``. The bigger,
slower version of this check is ``benchmarks/dev/oracle_parity.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

nemo_collection = pytest.importorskip(
    "nemo_gym.rollout_collection",
    reason="NeMo Gym is not installed here; .ci/nemo_gym.sh runs this in a venv beside it",
)

from health.parse import parse_line  # noqa: E402
from sidecar.perf import build_ng_perf  # noqa: E402
from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, write_run_dir  # noqa: E402

BIN = Path(sys.executable).parent
REPORTS = ("quality_summary.json", "rollout_verdicts.jsonl")
#: (seed, ignored checks): every fault kind at a high rate, with and without ignored checks.
CASES = [(101, ""), (202, "agent_turn_hollow,task_consistently_unhealthy")]


def _run_dir(tmp_path: Path, seed: int) -> Path:
    config = SyntheticConfig(
        num_tasks=40,
        repeats_per_task=3,
        payload_bytes_per_call=512,
        faults=FaultRates.mixed(0.06),
        broken_task_fraction=0.1,
        judge_call_probability=0.2,
        subagent_probability=0.5,
    )
    run_dir = tmp_path / "generated"
    run_dir.mkdir()
    write_run_dir(run_dir, config, seed)
    return run_dir


def _reports(command: list[str], source: Path, where: Path) -> dict[str, bytes]:
    """Run one tool on its own copy of the run; its report files with the copy's path neutralized."""
    shutil.copytree(source, where)
    done = subprocess.run([*command, str(where)], capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), f"{command[0]} failed ({done.returncode}): {done.stderr[-2000:]}"
    return {name: (where / name).read_bytes().replace(str(where).encode(), b"@RUN_DIR@") for name in REPORTS}


@pytest.mark.parametrize(("seed", "ignored"), CASES)
def test_reports_are_byte_identical_to_nemo_gym(tmp_path: Path, seed: int, ignored: str) -> None:
    run_dir = _run_dir(tmp_path, seed)
    flags = ["--ignore-checks", ignored] if ignored else []
    theirs = _reports([str(BIN / "gym"), "eval", "health-check", *flags], run_dir, tmp_path / "theirs")
    ours = _reports([str(BIN / "rollout-sidecar"), "health-check", *flags], run_dir, tmp_path / "ours")
    assert theirs["rollout_verdicts.jsonl"].count(b"\n") > 100
    for name in REPORTS:
        difference = _first_difference(ours[name], theirs[name])
        assert difference is None, f"seed {seed}: {name}: {difference}"


def _first_difference(ours: bytes, theirs: bytes) -> str | None:
    if ours == theirs:
        return None
    for number, (a, b) in enumerate(zip(ours.splitlines(), theirs.splitlines(), strict=False), start=1):
        if a != b:
            return f"line {number}: ours {a[:600]!r}, NeMo Gym's {b[:600]!r}"
    return f"ours has {len(ours.splitlines())} lines, NeMo Gym's {len(theirs.splitlines())}"


@pytest.mark.parametrize("seed", [seed for seed, _ in CASES])
def test_ng_perf_equals_nemo_gyms(tmp_path: Path, seed: int) -> None:
    rollouts = _run_dir(tmp_path, seed) / "rollouts.jsonl"
    compared = 0
    for number, line in enumerate(rollouts.read_bytes().splitlines(), start=1):
        record, error = parse_line(line)
        if record is None or error is not None:
            continue
        for latency in (None, 812.5):
            theirs = nemo_collection._build_ng_perf(orjson.loads(line), rollout_latency_ms=latency)
            ours = build_ng_perf(record, latency)
            assert orjson.dumps(ours) == orjson.dumps(theirs), f"seed {seed} line {number} latency {latency}"
        compared += 1
    assert compared > 100
