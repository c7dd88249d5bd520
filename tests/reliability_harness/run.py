"""The long reliability suite: every scenario at full size, one figure line each.

    .venv/bin/python -m tests.reliability_harness                 # everything (~20 min on 2 cores)
    .venv/bin/python -m tests.reliability_harness --only crash,fuzz
    .venv/bin/python -m tests.reliability_harness --quick         # CI sizes (what tests/reliability runs)

Exits 1 if any promise did not hold (each violation is printed). Services run as
``python -m sidecar.cli serve --port 0`` children on 127.0.0.1 (``--launch fork`` forks
this interpreter instead, as CI does).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: tests/reliability_harness/run.py
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from sidecar.http.logging import configure_logging
from tests.reliability_harness.big_bodies import run_big_bodies
from tests.reliability_harness.blocking_reads import describe, run_blocking_reads
from tests.reliability_harness.corrupt import run_corrupt_trials, run_schema_cases
from tests.reliability_harness.crash import run_crash_trials
from tests.reliability_harness.diskfull import run_disk_full_trials
from tests.reliability_harness.follow_refusals import run_follow_refusals
from tests.reliability_harness.follower import run_follower_trials
from tests.reliability_harness.fuzz import run_fuzz
from tests.reliability_harness.inputs import run_inputs
from tests.reliability_harness.load import percentile, run_load
from tests.reliability_harness.outage import run_outage
from tests.reliability_harness.page_pollers import run_page_pollers
from tests.reliability_harness.poison import OUT_OF_RANGE, run_poison
from tests.reliability_harness.restart import run_restart
from tests.reliability_harness.security import run_security_checks
from tests.reliability_harness.sidecar_process import Launch
from tests.reliability_harness.slow_clients import run_slow_clients

__all__ = ["main"]

Scenario = Callable[[Path, Launch, bool], tuple[str, list[str]]]


def _crash(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    r = run_crash_trials(
        20 if quick else 200, tmp, kills_per_run=5, num_tasks=100, max_gap_s=0.3, launch=launch
    )
    restart = sorted(r.restart_seconds)
    return (
        f"{r.trials} SIGKILLs mid-stream over {r.runs} runs ({r.idle_kills} more after the stream), "
        f"{r.events_acked} events acked, {r.retried_batches} batch retries, "
        f"{r.duplicate_acks} duplicate acks; "
        f"restart to ready p50 {percentile(restart, 50):.2f} s max {restart[-1]:.2f} s; "
        f"violations {len(r.violations)}",
        r.violations,
    )


def _corrupt(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    r = run_corrupt_trials(2 if quick else 50, tmp / "trials", launch=launch)
    (tmp / "schema").mkdir()
    s = run_schema_cases(tmp / "schema", launch=launch)
    cases = "; ".join(f"{name}: {outcome.split(':')[0]}" for name, outcome in s.schema_cases.items())
    return (
        f"torn WAL tail {r.torn_trials} trials (last batch kept whole {r.torn_last_batch_kept}, "
        f"dropped whole {r.torn_last_batch_dropped}); truncated database {r.truncated_trials} trials "
        f"(refused clearly {r.truncated_refused}, started complete {r.truncated_started_complete}); "
        f"{cases}; violations {len(r.violations) + len(s.violations)}",
        r.violations + s.violations,
    )


def _disk(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    r = run_disk_full_trials(1 if quick else 10, tmp)
    reads = sorted(r.read_seconds)
    return (
        f"{r.trials} trials (disk full / read-only alternating): {r.rejected_503} batches answered 503, "
        f"{r.accepted_while_faulted} still fitted; {r.reads_while_faulted} reads while faulted, all 200, "
        f"p99 {percentile(reads, 99) * 1000:.1f} ms; messages {sorted(r.messages)}; "
        f"violations {len(r.violations)}",
        r.violations,
    )


def _outage(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    if quick:
        r = run_outage(5.0, tmp, run_s=10.0, num_tasks=80, launch=launch)
    else:
        r = run_outage(60.0, tmp, run_s=120.0, num_tasks=400, launch=launch)
    return f"{r.summary()}; violations {len(r.violations)}", r.violations


def _load(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    if quick:
        r = run_load(1600, tmp, clients=16, batch=8, launch=launch)
    else:
        r = run_load(100_000, tmp, clients=64, batch=16, launch=launch)
    return (
        f"{r.summary()}; {r.reports_checked} reports == batch; violations {len(r.violations)}",
        r.violations,
    )


def _fuzz(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    r = run_fuzz(300 if quick else 10_000, tmp, launch=launch)
    statuses = ", ".join(f"{status}: {count}" for status, count in sorted(r.by_status.items()))
    return (
        f"{r.requests} generated requests ({r.not_sendable} more not encodable by httpx); "
        f"statuses {statuses}; "
        f"violations {len(r.violations)}",
        r.violations,
    )


def _security(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    r = run_security_checks(tmp, launch=launch)
    return (
        f"mutating routes {r.mutating_routes}: {r.unauthorized_401} unauthenticated requests, all 401; "
        f"{r.public_binds_refused}/4 non-loopback binds without a token refused; canary in "
        f"{r.canary_strings} strings of {r.canary_rows} rows, found in 0 of {r.outputs_scanned} outputs and "
        f"{r.log_bytes_scanned} log bytes unless listed; violations {len(r.violations)}",
        r.violations,
    )


def _follower(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    lines = []
    violations: list[str] = []
    for mode in ("tail",) if quick else ("tail", "any"):
        r = run_follower_trials(1 if quick else 10, tmp / mode, truncate=mode, launch=launch)
        failed = len({v.split(":")[0] for v in r.violations})
        lines.append(
            f"truncate={mode}: {r.trials} trials, {r.follower_kills} follower SIGKILLs, "
            f"{r.partial_writes} partial writes, {r.recreations} recreations, {r.truncations} truncations, "
            f"{r.final_lines} final lines; trials whose report != batch: {failed}"
        )
        violations += [f"truncate={mode}: {v}" for v in r.violations]
    return "; ".join(lines), violations


def _poison(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    r = run_poison(tmp, launch=launch, num_tasks=8 if quick else 400)
    return (
        f"{r.rows} rows ({r.poisoned_rows} with token counts up to 1.7e308 and two (uint64)-1 in one row), "
        f"each batch posted twice: {r.accepted} accepted, {r.duplicates} duplicates; "
        f"{r.refused_422}/{len(OUT_OF_RANGE)} out-of-range events refused 422 naming the field; "
        f"{r.reports_checked} reports all finite (largest token total {r.largest_token_total:.3e}), "
        f"{r.metric_scrapes} scrapes without +Inf/NaN or a falling _sum; violations {len(r.violations)}",
        r.violations,
    )


def _inputs(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    big, cap = (48 << 20, "4M") if quick else (256 << 20, "16M")
    r = run_inputs(tmp, launch=launch, big_line_bytes=big, readers=6, line_cap=cap)
    return (
        f"{r.refused} hostile materialized_inputs paths refused with {r.distinct_refusal_bodies} distinct "
        f"422 body; {r.accepted_plans} valid files planned; {r.big_reads} concurrent reads of a "
        f"{r.big_line_bytes >> 20} MiB single-line file (line cap {cap}) grew peak RSS by "
        f"{r.rss_growth_bytes / 2**20:.1f} MiB; violations {len(r.violations)}",
        r.violations,
    )


def _follow_refusals(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    line, cap = (3 << 20, 4 << 20) if quick else (36 << 20, 64 << 20)
    r = run_follow_refusals(tmp, launch=launch, line_bytes=line, body_cap=cap)
    return (
        f"a {line >> 20} MiB line (~{2 * line >> 20} MiB escaped) under a {cap >> 20} MiB body cap: "
        f"{r.long_records}/4 records live == batch; a line over the cap: exit {r.over_cap_exit}, "
        f"message names --body-cap: {'--body-cap' in r.over_cap_message}; wrong token: exit "
        f"{r.wrong_token_exit}, nothing checkpointed, rerun {r.token_rerun_records}/6 records; unreachable "
        f"sidecar: first stderr line after {r.unreachable_first_stderr_s or 0:.1f} s, exit "
        f"{r.unreachable_exit} after {r.unreachable_exit_s or 0:.1f} s (--give-up-after 2); "
        f"violations {len(r.violations)}",
        r.violations,
    )


def _restart(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    r = run_restart(tmp, launch=launch, num_tasks=3000 if quick else 100_000)
    return (
        f"journal of {r.events} events: /healthz answered after {r.healthz_s or 0:.2f} s, ready after "
        f"{r.ready_s or 0:.2f} s; {r.progress_polls} /readyz 503 answers with progress, "
        f"{r.drain_margin_answers} /drain_margin answers, none refused; busy port and journal under /proc: "
        f"exit 2 with one stderr line each; violations {len(r.violations)}",
        r.violations,
    )


def _slow_clients(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    if quick:
        r = run_slow_clients(tmp, launch=launch, attackers=300, stallers=50, max_per_peer=128)
    else:  # the service's defaults: 10 s header and body timeouts, 256 connections per peer
        r = run_slow_clients(
            tmp,
            launch=launch,
            attackers=800,
            stallers=100,
            header_timeout_s=10,
            body_timeout_s=10,
            max_per_peer=256,
        )
    return (
        f"{r.attackers} half-header + {r.stallers} stalled-body sockets from 127.0.0.1: "
        f"{r.closed_by_service} closed by the service, the slowest after {r.slowest_close_s:.1f} s; "
        f"/drain_margin on fresh connections meanwhile {r.polls_ok}/{r.polls} answered 200, "
        f"p99 {r.p99_ms:.1f} ms; violations {len(r.violations)}",
        r.violations,
    )


def _blocking_reads(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    if quick:
        r = run_blocking_reads(tmp, launch=launch, num_tasks=1500, inflight=5000, seconds=3.0, p99_bound_ms=0)
    else:
        r = run_blocking_reads(tmp, launch=launch, num_tasks=100_000, inflight=200_000, seconds=30.0)
    return describe(r), r.violations


def _page_pollers(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    if quick:
        r = run_page_pollers(tmp, launch=launch, num_tasks=1500, seconds=4.0, p99_bound_ms=0)
    else:
        r = run_page_pollers(tmp, launch=launch, num_tasks=100_000, seconds=30.0)
    base, loaded, polls = r.figures(r.baseline_ms), r.figures(r.loaded_ms), r.figures(r.poll_ms)
    return (
        f"{r.events} events journaled; /drain_margin ms p50/p99/max alone "
        f"{base[0]:.2f}/{base[1]:.2f}/{base[2]:.1f}, with {r.browsers} run pages polling every 2 s "
        f"{loaded[0]:.2f}/{loaded[1]:.2f}/{loaded[2]:.1f} (p99 ratio {loaded[1] / base[1]:.2f}); "
        f"{r.polls} page/timeline polls (p50 {polls[0]:.1f} ms, p99 {polls[1]:.1f} ms), "
        f"{r.trickled} events trickled in; violations {len(r.violations)}",
        r.violations,
    )


def _big_bodies(tmp: Path, launch: Launch, quick: bool) -> tuple[str, list[str]]:
    if quick:
        r = run_big_bodies(tmp, launch=launch, body_cap=8 << 20, concurrent=3, rounds=1)
    else:
        r = run_big_bodies(tmp, launch=launch, body_cap=64 << 20, concurrent=4, rounds=2)
    mib = 1 << 20
    return (
        f"{r.rounds} rounds of {r.concurrent} concurrent {r.body_bytes / mib:.1f} MiB bodies: "
        f"peak resident growth {r.peak_growth_bytes / mib:.0f} MiB ({r.peak_ratio:.1f}x one round's bodies), "
        f"resident growth after {r.after_growth_bytes / mib:.0f} MiB; violations {len(r.violations)}",
        r.violations,
    )


SCENARIOS: dict[str, Scenario] = {
    "crash": _crash,
    "corrupt": _corrupt,
    "diskfull": _disk,
    "outage": _outage,
    "load": _load,
    "fuzz": _fuzz,
    "security": _security,
    "follower": _follower,
    "poison": _poison,
    "inputs": _inputs,
    "follow-refusals": _follow_refusals,
    "restart": _restart,
    "slow-clients": _slow_clients,
    "blocking-reads": _blocking_reads,
    "page-pollers": _page_pollers,
    "big-bodies": _big_bodies,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help=f"comma-separated subset of {','.join(SCENARIOS)}")
    parser.add_argument("--quick", action="store_true", help="CI sizes")
    parser.add_argument("--launch", choices=["exec", "fork"], default="exec")
    args = parser.parse_args(argv)
    configure_logging("critical", stream=sys.stderr)  # the in-process service of "diskfull" stays quiet
    chosen = [name.strip() for name in args.only.split(",") if name.strip()] or list(SCENARIOS)
    unknown = sorted(set(chosen) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario(s): {', '.join(unknown)}")
    print(f"# rollout-sidecar reliability suite ({'quick' if args.quick else 'full'}, launch={args.launch})")
    print(f"# load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}, cores {os.cpu_count()}")
    failed: dict[str, list[Any]] = {}
    for name in chosen:
        began = time.monotonic()
        with tempfile.TemporaryDirectory(prefix=f"reliability-{name}-") as tmp:
            figures, violations = SCENARIOS[name](Path(tmp), args.launch, args.quick)
        status = "HELD" if not violations else "VIOLATED"
        print(f"{name:9s} {status:8s} ({time.monotonic() - began:.0f} s) {figures}", flush=True)
        for violation in violations[:10]:
            print(f"          - {violation}", flush=True)
        if violations:
            failed[name] = violations
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
