"""A real sidecar on a hand-moved clock, fed a generated run over HTTP, and a headless Chromium.

The generated run is simulated from :data:`T0`: its events are stamped ``at`` their simulated
finish (as ``dispatcher_client`` stamps them) and its rows' trajectories carry the same times.
The service's clock moves only when a test posts (to the latest time of the batch), so the run
has a timeline, a budget that runs out and in-flight ages, and every number the page shows
stays still while a test compares it with the sidecar's JSON.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from tests.sidecar.synthetic_support import (
    START_TIME,
    FaultRates,
    SyntheticConfig,
    api_steps,
    generate_events,
)

__all__ = [
    "CHROMIUM",
    "HOSTILE",
    "SECOND_AGENT",
    "T0",
    "ManualClock",
    "SidecarRun",
    "artifacts_dir",
    "chromium",
    "feed",
    "launch_args",
    "run_events",
    "sidecar",
    "start_run",
]

CHROMIUM = "/usr/bin/chromium"
HOSTILE = '<img src=x onerror="window.__pwned=1;alert(1)">'
"""Text that runs script if it were ever parsed as HTML."""
SECOND_AGENT = "second-agent"
"""The agent of a hostile run's odd tasks."""
T0 = START_TIME


def launch_args() -> list[str]:
    return ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--no-first-run"]  # fmt: skip


def artifacts_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where screenshots go: ``$ROLLOUT_SIDECAR_ARTIFACTS``, else a pytest temporary directory."""
    configured = os.environ.get("ROLLOUT_SIDECAR_ARTIFACTS")
    path = Path(configured) if configured else tmp_path_factory.mktemp("artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium driven by Playwright (never a downloaded browser); skips without them."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no system Chromium at {CHROMIUM} (apt-get install chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=launch_args())
        try:
            yield browser
        finally:
            browser.close()


class ManualClock:
    """The service's wall clock, moved by the test."""

    def __init__(self, start: float = T0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


def run_events(*, num_tasks: int = 24, repeats: int = 3, seed: int = 5, hostile: bool = False) -> list[Any]:
    """A generated run's API events; ``hostile``: model names are :data:`HOSTILE`, and so is the
    agent of even tasks' rows (the others name :data:`SECOND_AGENT`: two agents side by side)."""
    names = {"agent_name": HOSTILE, "policy_model": HOSTILE} if hostile else {}
    config = SyntheticConfig(
        num_tasks=num_tasks,
        repeats_per_task=repeats,
        model_calls_per_rollout=2,
        payload_bytes_per_call=128,
        faults=FaultRates.mixed(0.06),
        failure_rate=0.12,
        drained_fraction=0.05,
        **names,
    )
    return [
        step.event
        for step in api_steps(generate_events(config, seed), row_hook=_two_agents if hostile else None)
    ]


def _two_agents(row: dict[str, Any]) -> dict[str, Any]:
    task = row.get("_ng_task_index")
    if "agent_ref" not in row or (type(task) is int and task % 2 == 0):
        return row
    return {**row, "agent_ref": {"name": SECOND_AGENT}}


@dataclass
class SidecarRun:
    url: str
    client: httpx.Client
    clock: ManualClock
    run_id: str
    pending: list[Any] = field(default_factory=list)
    posted: list[Any] = field(default_factory=list)

    def post(self, events: list[Any]) -> None:
        response = self.client.post(f"/v1/runs/{self.run_id}/events", json=events)
        assert response.status_code == 200, response.text
        assert all(r["status"] in ("accepted", "duplicate") for r in response.json()["results"]), (
            response.text
        )

    def advance(self, batches: int, per_batch: int = 4) -> int:
        """Post the next ``batches`` batches of the run, the clock moved to the latest time of each."""
        posted = 0
        for _ in range(batches):
            if not self.pending:
                break
            batch, self.pending = self.pending[:per_batch], self.pending[per_batch:]
            self.clock.now = max([self.clock.now, *(event["at"] for event in batch if "at" in event)])
            self.post(batch)
            self.posted.extend(batch)
            posted += len(batch)
        return posted

    def get(self, path: str, **params: Any) -> Any:
        response = self.client.get(path, params=params)
        assert response.status_code == 200, response.text
        return response.json()


@contextmanager
def sidecar(tmp: Path) -> Iterator[tuple[ServiceThread, httpx.Client, ManualClock]]:
    """A real sidecar on a :class:`ManualClock` at :data:`T0`, and a client of it."""
    clock = ManualClock()
    state = tmp / "state"
    shutil.rmtree(state, ignore_errors=True)
    thread = ServiceThread(ServiceSettings(port=0, journal_path=state / "journal.sqlite3"), clock=clock)
    with thread as url, httpx.Client(base_url=url, timeout=30) as client:
        yield thread, client, clock


def start_run(
    url: str,
    client: httpx.Client,
    clock: ManualClock,
    run_id: str,
    *,
    budget_s: float = 250.0,
    hostile: bool = False,
) -> SidecarRun:
    """``run_id`` started at :data:`T0` with a plan and a budget, its generated events pending, and
    three rollouts outside them in flight (one with a hostile identity when ``hostile``)."""
    run = SidecarRun(url, client, clock, run_id, pending=run_events(hostile=hostile))
    plan = {str(task): 3 for task in range(24)}
    run.post([{"kind": "run_started", "plan": plan, "dispatch_budget_s": budget_s, "started_at": T0}])
    in_flight: list[Any] = [{"kind": "started", "task_index": 900 + i, "rollout_index": 0} for i in range(2)]
    if hostile:
        in_flight.append({"kind": "started", "task_index": HOSTILE, "rollout_index": 0})
    run.post([{**event, "at": T0} for event in in_flight])
    return run


@contextmanager
def feed(
    tmp: Path, run_id: str = "run-page", *, budget_s: float = 250.0, hostile: bool = False
) -> Iterator[SidecarRun]:
    """A real sidecar holding ``run_id`` (:func:`start_run`), nothing else yet."""
    with sidecar(tmp) as (_, client, clock):
        yield start_run(
            str(client.base_url).rstrip("/"), client, clock, run_id, budget_s=budget_s, hostile=hostile
        )
