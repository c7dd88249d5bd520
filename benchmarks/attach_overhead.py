"""What ``rollout-sidecar attach`` costs a NeMo Gym job: its throughput with and without attach.

Run in the environment ``.ci/nemo_gym.sh`` builds; modes, method and target: benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from dispatcher_client.attach import BOOTSTRAP_DIR, RUN_ID_ENV, URL_ENV  # noqa: E402
from tests.nemo_gym.agent_server import GymServers, collect_command, write_inputs  # noqa: E402
from tests.reliability_harness.sidecar_process import SidecarProcess, free_port  # noqa: E402

MODES = ("plain", "live", "down")


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(
    mode: str, agent: GymServers, where: Path, args: argparse.Namespace, sidecar: str, n: int
) -> tuple[float, float, float]:
    """One job; ``(collection rollouts/s, whole-process rollouts/s, its CPU ms per rollout)``."""
    inputs = write_inputs(where / "in.jsonl", args.tasks)
    output = where / f"{mode}-{n}" / "rollouts.jsonl"
    command = collect_command(
        agent.port, inputs, output, args.repeats, num_samples_in_parallel=args.concurrency
    )
    env = {key: value for key, value in os.environ.items() if not key.startswith("ROLLOUT_SIDECAR_ATTACH")}
    if mode != "plain":
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(BOOTSTRAP_DIR), env.get("PYTHONPATH")]))
        env[URL_ENV] = sidecar if mode == "live" else f"http://127.0.0.1:{free_port()}"
        env[RUN_ID_ENV] = f"bench-{mode}-{n}"
    agent.first = agent.last = None
    started, cpu = time.perf_counter(), _cpu()
    # in the scratch directory: Hydra writes outputs/ where the job starts
    done = subprocess.run(command, env=env, cwd=where, capture_output=True, text=True, check=False)
    wall, cpu = time.perf_counter() - started, _cpu() - cpu
    if done.returncode != 0 or agent.first is None or agent.last is None:
        raise SystemExit(f"{mode}: the job failed ({done.returncode}): {done.stderr[-2000:]}")
    if mode == "live" and ", 0 refused, 0 not delivered;" not in done.stderr:
        raise SystemExit(f"live: not every event was delivered: {done.stderr[-1000:]}")
    rollouts = args.tasks * args.repeats
    return rollouts / (agent.last - agent.first), rollouts / wall, cpu * 1000 / rollouts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=200, help="tasks per job (default 200)")
    parser.add_argument("--repeats", type=int, default=2, help="rollouts per task (default 2)")
    parser.add_argument("--concurrency", type=int, default=32, help="num_samples_in_parallel (default 32)")
    parser.add_argument("--scale", type=float, default=1000.0, help="task time divisor (default 1000)")
    parser.add_argument("--rounds", type=int, default=5, help="runs of each mode, interleaved (default 5)")
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float, float]]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as scratch:
        where = Path(scratch)
        sidecar = SidecarProcess(where / "journal.sqlite", port=free_port(), log_level="warning")
        agent = GymServers(args.tasks, args.repeats, seed=7, scale=args.scale)
        url = sidecar.start()
        agent.start()
        try:
            for n in range(args.rounds):
                for mode in MODES[n % 3 :] + MODES[: n % 3]:  # each mode takes each place in turn
                    results[mode].append(_run(mode, agent, where, args, url, n))
                    print(f"round {n} {mode:5s}: " + _line(results[mode][-1]))
        finally:
            agent.stop()
            sidecar.stop()
    base = [statistics.median(values) for values in zip(*results["plain"], strict=True)]
    size = f"{args.tasks * args.repeats} rollouts per job, concurrency {args.concurrency}"
    print(f"\n{size}, {args.rounds} rounds; medians, and their ratio to plain (collecting / job / CPU)")
    for mode in MODES:
        medians = [statistics.median(values) for values in zip(*results[mode], strict=True)]
        ratios = " / ".join(f"{m / b:.3f}" for m, b in zip(medians, base, strict=True))
        print(f"{mode:5s}: {_line(medians)}; ratio {ratios}")


def _line(figures: Sequence[float]) -> str:
    collecting, job, cpu = figures
    return f"{collecting:7.1f} rollouts/s collecting, {job:6.1f} over the job, {cpu:5.2f} CPU ms per rollout"


if __name__ == "__main__":
    main()
