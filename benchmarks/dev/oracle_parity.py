"""Health reports and ``ng_perf`` of fault-heavy generated runs, against the NeMo Gym 0.7.0 oracle.

NEEDS THE ORACLE (``bash ../shared/tools/reference/setup.sh``); a development tool, never used by
tests or CI.

For each seed it writes a run directory with ``sidecar.demo.synthetic`` (every fault kind at a high
rate, broken tasks, judge calls, subagents; small payloads so many rows fit), stores the
reference's outputs with ``oracle.py`` and compares ours with ``compare.py``: both report files
byte for byte (``rollout-sidecar health-check``, some seeds with ignored checks) and every
rollout's ``ng_perf`` (``build_ng_perf``, printed by the ``ng-perf`` subcommand below in the
format ``oracle.py`` stores).

    .venv/bin/python benchmarks/dev/oracle_parity.py [--seeds 4] [--tasks 60] [--workdir /tmp/parity]

Prints one ``compare.py`` verdict line per run; exit status 1 when anything differs.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("ROLLOUT_SIDECAR_SHARED", REPO.parent / "shared"))
REFERENCE_TOOLS = SHARED / "tools" / "reference"
#: Ignored-check sets rotated over the seeds (the first seed ignores nothing).
IGNORED = (
    "",
    "agent_turn_hollow,task_consistently_unhealthy",
    "record_unreadable,rollout_duplicate_identity",
)


def ng_perf_lines(rollouts: Path) -> None:
    """One JSON line per readable rollout: ``line``, raw identity and ``build_ng_perf(row, None)``."""
    from health.parse import parse_line
    from sidecar.perf import build_ng_perf

    out = sys.stdout.buffer
    with rollouts.open("rb") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            record, error = parse_line(line)
            if record is None or error is not None:
                continue
            row = {
                "line": number,
                "_ng_task_index": record.get("_ng_task_index"),
                "_ng_rollout_index": record.get("_ng_rollout_index"),
            }
            if "stage_index" in record:
                row["stage_index"] = record.get("stage_index")
            row["ng_perf"] = build_ng_perf(record, None)
            out.write(orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE))


def _write_run(run_dir: Path, seed: int, tasks: int) -> None:
    sys.path.insert(0, str(REPO))  # the generator lives with the tests
    from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, write_run_dir

    config = SyntheticConfig(
        num_tasks=tasks,
        repeats_per_task=3,
        payload_bytes_per_call=1024,
        faults=FaultRates.mixed(0.06),
        broken_task_fraction=0.1,
        judge_call_probability=0.2,
        subagent_probability=0.5,
    )
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run_dir(run_dir, config, seed)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command")
    ng = sub.add_parser("ng-perf", help="print our ng_perf JSONL for a rollouts file (used by compare.py)")
    ng.add_argument("rollouts", type=Path)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=60)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rollout-sidecar-parity"))
    args = parser.parse_args()
    if args.command == "ng-perf":
        ng_perf_lines(args.rollouts)
        return 0

    cli = Path(sys.executable).parent / "rollout-sidecar"
    ng_perf_cmd = f"{shlex.quote(sys.executable)} {shlex.quote(__file__)} ng-perf {{rollouts}}"
    failures = 0
    for index in range(args.seeds):
        seed = 101 * (index + 1)
        ignored = IGNORED[index % len(IGNORED)]
        run_dir = args.workdir / f"run-{seed}"
        expected = args.workdir / f"expected-{seed}"
        _write_run(run_dir, seed, args.tasks)
        oracle = [sys.executable, str(REFERENCE_TOOLS / "oracle.py"), str(run_dir), str(expected)]
        if ignored:
            oracle += ["--ignored-checks", ignored]
        subprocess.run(oracle, check=True, capture_output=True)
        ours = [str(cli), "health-check", "{run_dir}"] + (["--ignore-checks", ignored] if ignored else [])
        compare = [sys.executable, str(REFERENCE_TOOLS / "compare.py"), str(run_dir), str(expected)]
        compare += ["--ng-perf", ng_perf_cmd, "--", *ours]
        result = subprocess.run(compare, capture_output=True, text=True, check=False)
        verdict = [line for line in result.stdout.splitlines() if line.startswith("conformance")]
        print(f"seed {seed} ignored [{ignored}]: " + " | ".join(verdict or [result.stdout.strip()[-200:]]))
        failures += result.returncode != 0
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
