"""``health-check --glob`` (and ``--ray``) on generated multi-shard runs, against the NeMo Gym 0.7.0 oracle.

NEEDS THE ORACLE (``bash ../shared/tools/reference/setup.sh``); a development tool, never used by
tests or CI.

For each seed it writes a fault-heavy run with ``sidecar.demo.synthetic``, deals its rows over K shard
files (``rollouts-rs<i>-chunk<j>.jsonl`` plus the ``_failures`` / ``_materialized_inputs`` side
files ``--glob`` must skip), and adds what only a global reduce gets right: identities written
in two shards, records without ``_ng_task_index`` in every shard, unreadable lines, blank lines,
CRLF, U+2028 and invalid UTF-8. It then runs the reference's
``run_health_checks(sorted(shards), output_dir=RUN_DIR)`` and our
``rollout-sidecar health-check RUN_DIR --glob 'rollouts-*.jsonl'`` (with ``--ray local`` too
when Ray is installed and ``--ray`` is given) and compares both reports byte for byte.

    .venv/bin/python benchmarks/dev/shard_parity.py [--seeds 3] [--tasks 80] [--shards 4] [--ray]

Prints one line per run; exit status 1 when anything differs.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("ROLLOUT_SIDECAR_SHARED", REPO.parent / "shared"))
REFERENCE_TOOLS = SHARED / "tools" / "reference"
REPORTS = ("quality_summary.json", "rollout_verdicts.jsonl")
# No ``"_ng_task_index": null``: the reference aborts the whole run on it (we report it unreadable).
ODD_LINES = (
    b"",
    b"   ",
    b"{torn",
    b"[1, 2]",
    b'{"_ng_rollout_index": 1}',
    b'{"_ng_task_index": 1, "_ng_rollout_index": 0, "x": "\xff bad utf-8"}',
    b'{"_ng_task_index": 2, "_ng_rollout_index": 7, "x": "a\xe2\x80\xa8b"}',
)


def reference(run_dir: str, paths: list[str]) -> None:
    """Runs under the reference venv (``oracle.bootstrap`` re-executes this script there)."""
    sys.path.insert(0, str(REFERENCE_TOOLS))
    import oracle

    oracle.bootstrap()
    from nemo_gym.rollout_health import run_health_checks

    run_health_checks([Path(path) for path in paths], output_dir=Path(run_dir))


def write_shards(run_dir: Path, seed: int, tasks: int, shards: int) -> list[Path]:
    import orjson

    sys.path.insert(0, str(REPO))  # the generator lives with the tests
    from tests.sidecar.synthetic_support import FaultRates, SyntheticConfig, generate_rows

    config = SyntheticConfig(
        num_tasks=tasks,
        repeats_per_task=3,
        payload_bytes_per_call=512,
        faults=FaultRates.mixed(0.06),
        broken_task_fraction=0.1,
        judge_call_probability=0.2,
        subagent_probability=0.5,
    )
    rng = random.Random(seed)
    lines: list[list[bytes]] = [[] for _ in range(shards)]
    rows = [orjson.dumps(row) for row in generate_rows(config, seed)]
    for row in rows:
        lines[rng.randrange(shards)].append(row)
    for shard in range(shards):
        lines[shard].append(rng.choice(rows))  # an identity another shard (or this one) holds too
        lines[shard].append(b'{"_ng_rollout_index": %d, "response": {}}' % shard)
        for odd in ODD_LINES:
            lines[shard].insert(rng.randrange(len(lines[shard]) + 1), odd)
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    paths = []
    for shard, shard_lines in enumerate(lines):
        stem = f"rollouts-rs{shard}-chunk{shard % 3}"
        separator = b"\r\n" if shard % 2 else b"\n"
        tail = b"" if shard == 0 else separator  # the first shard ends without a newline
        (run_dir / f"{stem}.jsonl").write_bytes(separator.join(shard_lines) + tail)
        (run_dir / f"{stem}_failures.jsonl").write_bytes(b'{"failure": true}\n')
        (run_dir / f"{stem}_materialized_inputs.jsonl").write_bytes(b"{}\n")
        paths.append(run_dir / f"{stem}.jsonl")
    return sorted(paths, key=str)


def _reports(run_dir: Path) -> list[bytes]:
    return [(run_dir / name).read_bytes() for name in REPORTS]


def _clear(run_dir: Path) -> None:
    for name in REPORTS:
        (run_dir / name).unlink(missing_ok=True)


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command")
    ref = sub.add_parser("reference", help="(internal) run the reference over the given paths")
    ref.add_argument("run_dir")
    ref.add_argument("paths", nargs="+")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=80)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--ray", action="store_true", help="also run ours with --ray local")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/rollout-sidecar-shard-parity"))
    args = parser.parse_args()
    if args.command == "reference":
        reference(args.run_dir, args.paths)
        return 0

    cli = str(Path(sys.executable).parent / "rollout-sidecar")
    failures = 0
    for index in range(args.seeds):
        seed = 211 * (index + 1)
        run_dir = (args.workdir / f"run-{seed}").resolve()
        paths = write_shards(run_dir, seed, args.tasks, args.shards)
        command = [sys.executable, __file__, "reference", str(run_dir), *map(str, paths)]
        subprocess.run(command, check=True, capture_output=True)
        expected = _reports(run_dir)
        variants = {"pool": ["--workers", "2"], "serial": ["--workers", "1"]}
        if args.ray:
            variants["ray"] = ["--ray", "local"]
        verdicts = []
        for label, extra in variants.items():
            _clear(run_dir)
            ours = [cli, "health-check", str(run_dir), "--glob", "rollouts-*.jsonl", *extra]
            subprocess.run(ours, check=True, capture_output=True)
            same = _reports(run_dir) == expected
            failures += not same
            verdicts.append(f"{label} {'byte-identical' if same else 'DIFFERENT'}")
        records = expected[1].count(b"\n")
        print(f"seed {seed}: {len(paths)} shards, {records} rows: " + ", ".join(verdicts), flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
