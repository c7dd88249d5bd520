"""Accounting: one identity counts once; expected = succeeded + failed + drained + missing."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.accounting import Accounting, AccountingSnapshot
from sidecar.server import ServiceThread
from sidecar.settings import ServiceSettings

from .service_support import generate_run, post_events


def _identity_holds(snapshot: AccountingSnapshot) -> None:
    assert snapshot.missing is not None
    assert snapshot.expected == snapshot.succeeded + snapshot.failed + snapshot.drained + snapshot.missing


class TestSnapshot:
    def test_with_a_plan(self) -> None:
        accounting = Accounting({"0": 2, "1": 2}, max_attempts=3)
        accounting.succeeded((0, 0))
        accounting.failed((0, 1), terminal=False)
        accounting.failed((0, 1), terminal=False)
        accounting.succeeded((0, 1))  # a retry that succeeded counts once, as a success
        accounting.failed((1, 0), terminal=True)
        accounting.succeeded((7, 0))  # outside the plan
        open_run = accounting.snapshot()
        assert (open_run.expected, open_run.succeeded, open_run.failed, open_run.drained) == (4, 2, 1, 0)
        assert (open_run.missing, open_run.pending, open_run.unplanned) == (1, 1, 1)
        assert open_run.failed_attempts == 3 and open_run.failed_terminal == 1
        _identity_holds(open_run)
        ended = accounting.snapshot(ended=True)
        assert (ended.missing, ended.pending) == (1, 0)  # never heard of: missing, not pending
        _identity_holds(ended)

    def test_a_retryable_failure_is_pending_while_the_run_is_open(self) -> None:
        accounting = Accounting({"0": 1}, max_attempts=3)
        accounting.failed((0, 0), terminal=False)
        assert (accounting.snapshot().pending, accounting.snapshot(ended=True).pending) == (1, 0)

    def test_without_a_plan_every_rollout_is_counted_and_nothing_is_expected(self) -> None:
        accounting = Accounting(None, max_attempts=3)
        for rollout in range(5):
            accounting.succeeded((0, rollout))
        accounting.drained((1, 0))
        snapshot = accounting.snapshot(ended=True)
        assert (snapshot.succeeded, snapshot.drained) == (5, 1)
        assert snapshot.expected is snapshot.missing is snapshot.pending is snapshot.unplanned is None
        assert snapshot.tasks_planned is None


def test_an_ended_runs_report_is_frozen_and_replays_identically(tmp_path: Path) -> None:
    """Rates stop at the run's end; a restart that replays the journal gives the same report."""
    run = generate_run(num_tasks=6, repeats=2, seed=3)
    journal = tmp_path / "j.sqlite3"
    settings = ServiceSettings(port=0, journal_path=journal)
    with ServiceThread(settings) as url, httpx.Client(base_url=url) as client:
        post_events(client, "frozen", [{"kind": "run_started", "plan": run.plan}, *run.events])
        post_events(client, "frozen", [{"kind": "run_ended"}])
        first = client.get("/report", params={"run_id": "frozen"}).content
        time.sleep(0.05)  # the wall clock moves on; the ended run's rates do not
        assert client.get("/report", params={"run_id": "frozen"}).content == first
        report = client.get("/report", params={"run_id": "frozen"}).json()
    with ServiceThread(settings) as url:
        replayed = httpx.get(f"{url}/report", params={"run_id": "frozen"}).content
    assert replayed == first
    assert report["latency"]["completions_per_hour"] is not None
    accounting = report["accounting"]
    assert accounting["pending"] == 0
    assert accounting["expected"] == sum(accounting[k] for k in ("succeeded", "failed", "drained", "missing"))


_OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(["succeeded", "failed", "terminal", "drained"]),
        st.sampled_from([0, 1, 2, "7"]),
        st.integers(0, 3),
    ),
    max_size=40,
)


@settings(max_examples=80, deadline=None)
@given(_OPERATIONS, st.booleans(), st.integers(1, 3))
def test_counts_follow_every_rollouts_latest_state(
    operations: list[tuple[str, int | str, int]], with_plan: bool, max_attempts: int
) -> None:
    """The counters kept as statuses change equal a recount of every rollout's latest state."""
    plan = {"0": 2, "1": 3, "7": 1} if with_plan else None
    accounting = Accounting(dict(plan) if plan else None, max_attempts)
    seen: dict[tuple[int | str, int], set[str]] = {}
    for operation, task, rollout in operations:
        key = (task, rollout)
        if operation == "succeeded":
            accounting.succeeded(key)
        elif operation == "drained":
            accounting.drained(key)
        else:
            accounting.failed(key, terminal=operation == "terminal")
        seen.setdefault(key, set()).add(operation)
        snapshot = accounting.snapshot()
        counts = {"succeeded": 0, "failed": 0, "terminal": 0, "drained": 0, "unplanned": 0}
        for (t, r), ops in seen.items():
            if plan is not None and not (str(t) in plan and r < plan[str(t)]):
                counts["unplanned"] += 1
            elif "succeeded" in ops:
                counts["succeeded"] += 1
            elif ops & {"failed", "terminal"}:
                counts["failed"] += 1
                counts["terminal"] += "terminal" in ops
            else:
                counts["drained"] += 1
        assert (snapshot.succeeded, snapshot.failed, snapshot.failed_terminal, snapshot.drained) == (
            counts["succeeded"],
            counts["failed"],
            counts["terminal"],
            counts["drained"],
        )
        assert snapshot.unplanned == (counts["unplanned"] if plan is not None else None)
        if plan is not None:
            _identity_holds(snapshot)
