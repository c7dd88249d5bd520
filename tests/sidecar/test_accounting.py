"""Accounting: one identity counts once; expected = succeeded + failed + drained + missing."""

from __future__ import annotations

import pickle
import random
import time
from pathlib import Path

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from sidecar.state.accounting import Accounting, AccountingSnapshot

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


class _Reference:
    """The accounting rules written plainly: one dict entry per rollout, counts per task."""

    def __init__(self, plan: dict[str, int], max_attempts: int) -> None:
        self.plan, self.max_attempts = plan, max_attempts
        self.status: dict[tuple[int | str, int | str], tuple[set[str], int, bool]] = {}
        self.resolved: dict[str, int] = {}
        self.complete: set[str] = set()

    def planned(self, key: tuple[int | str, int | str]) -> bool:
        repeats = self.plan.get(str(key[0]))
        return repeats is not None and isinstance(key[1], int) and 0 <= key[1] < repeats

    def update(self, key: tuple[int | str, int | str], kind: str, terminal: bool = False) -> int | str | None:
        kinds, attempts, was_resolved = self.status.get(key, (set(), 0, False))
        kinds = kinds | {kind} | ({"terminal"} if terminal else set())
        attempts += kind == "failed"
        resolved = was_resolved or bool({"succeeded", "terminal"} & kinds)
        resolved = resolved or ("failed" in kinds and attempts >= self.max_attempts)
        self.status[key] = (kinds, attempts, resolved)
        task = str(key[0])
        if not self.planned(key) or not resolved or was_resolved:
            return None
        self.resolved[task] = self.resolved.get(task, 0) + 1
        if self.resolved[task] < self.plan[task] or task in self.complete:
            return None
        self.complete.add(task)
        with_success = any(
            "succeeded" in kinds and str(k[0]) == task and self.planned(k)
            for k, (kinds, _, _) in self.status.items()
        )
        return key[0] if with_success else None


@pytest.mark.parametrize("seed", range(8))
def test_random_events_follow_the_plain_rules(seed: int) -> None:
    """Flat slots, dict entries and tasks above the flat limit all follow the same rules, also
    when a ``str`` task spelled like an ``int`` one ("1") is heard of first, and across pickling."""
    rng = random.Random(seed)
    plan = {"0": 3, "1": 2, "2": 5000, "a": 2, "-1": 1, "1000000": 2}  # 10**6: past the dense range
    accounting, reference = Accounting(plan, max_attempts=2), _Reference(plan, max_attempts=2)
    assert accounting.drained(("1", 1)) is reference.update(("1", 1), "drained") is None
    tasks: list[int | str] = [0, 1, 2, "1", "a", -1, 9, 1_000_000, "1000000"]
    rollouts: list[int | str] = [0, 1, 2, 4999, 5000, "x"]
    for step in range(400):
        key = (rng.choice(tasks), rng.choice(rollouts))
        kind = rng.choice(["succeeded", "failed", "failed", "drained"])
        if kind == "failed":
            terminal = rng.random() < 0.2
            got, want = accounting.failed(key, terminal=terminal), reference.update(key, kind, terminal)
        elif kind == "succeeded" and step % 2:
            before = "succeeded" in reference.status.get(key, (set(), 0, False))[0]
            (again, got), want = accounting.succeeded_again(key), reference.update(key, kind)
            assert again is before, (step, key)
        elif kind == "succeeded":
            got, want = accounting.succeeded(key), reference.update(key, kind)
        else:
            got, want = accounting.drained(key), reference.update(key, kind)
        assert got == want, (step, key, kind)
        assert accounting.has_succeeded(key) == ("succeeded" in reference.status[key][0])
        if step % 100 == 99:
            accounting = pickle.loads(pickle.dumps(accounting))
    snapshot = accounting.snapshot()
    planned = {key: value for key, value in reference.status.items() if reference.planned(key)}
    assert snapshot.unplanned == len(reference.status) - len(planned)
    assert snapshot.succeeded == sum("succeeded" in kinds for kinds, _, _ in planned.values())
    assert snapshot.tasks_complete == len(reference.complete)
    succeeded_tasks = {key[0] for key, (kinds, _, _) in reference.status.items() if "succeeded" in kinds}
    assert set(accounting.succeeded_tasks()) == succeeded_tasks
