"""Real NeMo Gym output: our health check against the reference on every bundled example run.

NEEDS THE ORACLE (``bash ../shared/tools/reference/setup.sh``; ``source /tmp/oracle/env.sh``);
a development tool, never used by tests or CI.

NeMo Gym 0.7.0's source distribution, which the oracle setup downloads, ships
``example_rollouts*.jsonl`` files written by real agents and resource servers. For each one this
copies the file into a scratch run directory, runs ``rollout-sidecar health-check`` on it, sets its
reports aside, runs the reference's ``refcli.py health-check`` on the same directory (reports name
the input's path) and compares ``quality_summary.json`` and ``rollout_verdicts.jsonl`` byte for
byte. It also counts the rows ``health.fast_path`` vouches for,
so a real shape that always falls back to the full path shows up here.

    source /tmp/oracle/env.sh
    .venv/bin/python benchmarks/dev/example_rollouts_parity.py            # every file
    .venv/bin/python benchmarks/dev/example_rollouts_parity.py --limit 20

Prints one line per file that differs or fails, then the totals; exit status 1 on any difference.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("ROLLOUT_SIDECAR_SHARED", REPO.parent / "shared"))
REFCLI = SHARED / "tools" / "reference" / "refcli.py"
REPORTS = ("quality_summary.json", "rollout_verdicts.jsonl")


def _fast_rows(path: Path) -> tuple[int, int]:
    """(non-blank rows, rows the fast path vouches for)."""
    from health.fast_path import read_everyday_record

    rows = fast = 0
    with path.open("rb") as handle:
        for line in handle:
            stripped = line.strip()
            if stripped:
                rows += 1
                fast += read_everyday_record(stripped) is not None
    return rows, fast


def _run(command: list[str]) -> str | None:
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    return None if done.returncode == 0 else (done.stderr.strip().splitlines() or ["?"])[-1]


def _compare(source: Path, scratch: Path, oracle_python: str) -> str | None:
    """``None`` when both tools wrote the same bytes, else what differs or failed."""
    scratch.mkdir(parents=True)
    shutil.copyfile(source, scratch / "rollouts.jsonl")
    failed = _run([sys.executable, "-m", "sidecar.cli", "health-check", str(scratch)])
    if failed:
        return f"ours failed: {failed}"
    ours = {name: (scratch / name).read_bytes() for name in REPORTS}
    for name in REPORTS:
        (scratch / name).unlink()
    failed = _run([oracle_python, str(REFCLI), "health-check", str(scratch)])
    if failed:
        return f"reference failed: {failed}"
    differing = [name for name in REPORTS if ours[name] != (scratch / name).read_bytes()]
    return f"differs: {', '.join(differing)}" if differing else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=None, help="check only the first N files")
    args = parser.parse_args()
    root = os.environ.get("ORACLE_ROOT")
    oracle_python = os.environ.get("ORACLE_PY")
    if not root or not oracle_python:
        parser.error("source /tmp/oracle/env.sh first (the oracle is not installed or not sourced)")
    files = sorted(
        path
        for path in Path(root, "dl").rglob("*rollouts*.jsonl")
        if "materialized_inputs" not in path.name and path.stat().st_size
    )[: args.limit]
    identical = rows = fast = 0
    problems = 0
    with tempfile.TemporaryDirectory(prefix="example-parity-") as scratch:
        for number, path in enumerate(files):
            file_rows, file_fast = _fast_rows(path)
            rows += file_rows
            fast += file_fast
            problem = _compare(path, Path(scratch, str(number)), oracle_python)
            if problem is None:
                identical += 1
            else:
                problems += 1
                print(f"{path.relative_to(root)}: {problem}")
    print(
        f"{len(files)} example files, {identical} with byte-identical reports, {problems} not; "
        f"{rows} rows, {fast} taken by the fast path ({fast / max(rows, 1):.1%})"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
