"""The run's end forecast and its open task groups, on the real service over HTTP (and the
groups' bound on the state object itself)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sidecar.export.trackers.keys import PREFIX, live_metrics
from sidecar.http.server import ServiceThread
from sidecar.http.settings import ServiceSettings
from sidecar.journal import StartedFact
from sidecar.state.groups import MAX_GROUPS, OpenGroups

T0 = 1_700_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ServiceThread, httpx.Client, Clock]]:
    clock = Clock()
    thread = ServiceThread(ServiceSettings(port=0, journal_path=tmp_path / "j.sqlite3"), clock=clock)
    with thread as url, httpx.Client(base_url=url, timeout=30) as client:
        yield thread, client, clock


def _post(client: httpx.Client, run_id: str, events: list[dict[str, Any]]) -> None:
    response = client.post(f"/v1/runs/{run_id}/events", json=events)
    assert response.status_code == 200, response.text
    assert {r["status"] for r in response.json()["results"]} <= {"accepted"}, response.text


def _done(k: int, at: float, seconds: float = 10.0) -> dict[str, Any]:
    task, rollout = divmod(k, 4)
    row = {"_ng_task_index": task, "_ng_rollout_index": rollout, "reward": 1.0}
    return {"kind": "completed", "task_index": task, "rollout_index": rollout, "seconds": seconds,
            "row": row, "at": at}  # fmt: skip


def _start(k: int, at: float) -> dict[str, Any]:
    task, rollout = divmod(k, 4)
    return {"kind": "started", "task_index": task, "rollout_index": rollout, "at": at}


def _waves(client: httpx.Client, clock: Clock, run_id: str, *, plan: bool = True) -> None:
    """40 rollouts of exactly 10 s, 4 at a time, from T0: at T0 + 25 s waves 0 and 1 finished (8),
    wave 2 (4) runs since T0 + 20."""
    start: dict[str, Any] = {"kind": "run_started", "started_at": T0, "dispatch_budget_s": 58.0,
                             "drain_margin_s": 0.0}  # fmt: skip
    if plan:
        start["plan"] = {str(task): 4 for task in range(10)}
    _post(client, run_id, [start])
    for wave in range(3):
        _post(client, run_id, [_start(4 * wave + i, T0 + 10 * wave) for i in range(4)])
        if wave < 2:
            _post(client, run_id, [_done(4 * wave + i, T0 + 10 * wave + 10) for i in range(4)])
    clock.now = T0 + 25.0


def test_fixed_durations_and_concurrency_give_the_analytic_answer(served: Any) -> None:
    """Waves of 4 every 10 s: the in-flight wave ends 5 s from now, the 28 not started need 7
    more waves (the last ends 75 s from now, starts 65 s from now). The budget leaves 33 s: waves
    start at +5, +15, +25 (the last is in flight at the end), none at +35."""
    _, client, clock = served
    _waves(client, clock, "fixed")
    body = client.get("/v1/runs/fixed/forecast").json()
    assert body["basis"]["reason"] is None and body["basis"]["samples"] == 8
    assert (body["planned"], body["finished"], body["in_flight"], body["not_started"]) == (40, 8, 4, 28)
    assert body["concurrency"] == 4 and body["as_of"] == T0 + 25.0
    assert body["by_budget_end"] == {
        "finished": {"p10": 20, "p50": 20, "p90": 20},
        "drained": {"p10": 16, "p50": 16, "p90": 16},
    }
    assert body["cut_off"] == {"p10": 4, "p50": 4, "p90": 4}
    assert body["eta_all_s"] == {"p50": 75.0, "p90": 75.0}
    assert body["budget_for_all_s"] == 25.0 + 65.0


def test_fields_are_null_with_a_reason_while_data_is_short(served: Any) -> None:
    _, client, clock = served
    _waves(client, clock, "unplanned", plan=False)
    body = client.get("/v1/runs/unplanned/forecast").json()
    assert body["planned"] is None and body["not_started"] is None
    assert "no plan" in body["basis"]["reason"]
    start = {"kind": "run_started", "plan": {"0": 4}, "dispatch_budget_s": 60.0, "started_at": T0}
    _post(client, "short", [start, _start(0, T0), _start(1, T0), _done(0, T0 + 3.0)])
    short = client.get("/v1/runs/short/forecast").json()
    assert short["basis"]["reason"] == "1 of the 5 completions needed"
    assert short["by_budget_end"] is None and short["cut_off"] is None
    assert short["eta_all_s"] is None and short["budget_for_all_s"] is None
    assert (short["planned"], short["finished"], short["in_flight"], short["not_started"]) == (4, 1, 1, 2)
    unknown = client.get("/v1/runs/nope/forecast")
    assert unknown.status_code == 404 and unknown.json()["field"] == "run_id"


def test_no_forecast_work_on_the_loop(served: Any) -> None:
    """The forecast is computed on a worker thread from a cut: while one is held mid-way, the
    service acknowledges events and answers /drain_margin."""
    thread, client, clock = served
    _waves(client, clock, "held")
    building, release = threading.Event(), threading.Event()
    names: list[str] = []

    def hold() -> None:
        names.append(threading.current_thread().name)
        building.set()
        assert release.wait(60), "the test never released the build"

    thread.service.reads.on_compute = hold
    try:
        with httpx.Client(base_url=str(client.base_url), timeout=30) as other:
            result: list[httpx.Response] = []
            reader = threading.Thread(target=lambda: result.append(other.get("/v1/runs/held/forecast")))
            reader.start()
            assert building.wait(30)
            _post(client, "held", [_done(8, T0 + 30.0)])  # acknowledged while the forecast is held
            assert client.get("/drain_margin", params={"run_id": "held"}).status_code == 200
            assert reader.is_alive()
            release.set()
            reader.join(30)
    finally:
        thread.service.reads.on_compute = None
        release.set()
    assert result[0].status_code == 200 and result[0].json()["finished"] == 8  # the cut's
    assert names and names[0] != threading.main_thread().name and "sidecar" not in names[0]


def test_groups_list_the_longest_waiting_and_refuse_a_bad_limit(served: Any) -> None:
    _, client, clock = served
    _waves(client, clock, "groups")
    _post(client, "groups", [_done(8, T0 + 26.0, 6.0)])
    body = client.get("/v1/runs/groups/groups", params={"limit": 1}).json()
    assert (body["open"], body["untracked"]) == (1, 0)  # tasks 0 and 1 closed, task 2 open
    assert body["groups"] == [{"task_index": 2, "planned": 4, "finished": 1, "in_flight": 3,
                               "duration_cv": None, "oldest_age_s": 5.0}]  # fmt: skip
    refused = client.get("/v1/runs/groups/groups", params={"limit": 1001})
    assert refused.status_code == 400 and refused.json()["field"] == "limit"


def test_groups_stay_bounded_under_100k_open_tasks() -> None:
    groups = OpenGroups()
    for task in range(100_000):
        groups.apply(StartedFact(T0, 0, task, 0, 0, T0 + task))
    assert len(groups) == MAX_GROUPS and groups.untracked == 100_000 - MAX_GROUPS
    oldest = groups.blocking(T0 + 200_000, 3, None)
    assert [g["task_index"] for g in oldest] == [0, 1, 2]
    groups.close(0)
    groups.apply(StartedFact(T0, 0, 0, 1, 0, T0))  # a freed place takes a new group
    assert len(groups) == MAX_GROUPS


def test_gauges_tracker_keys_and_the_report_carry_the_forecast(served: Any) -> None:
    """The same numbers in /metrics and the tracker's live keys; at the end /report holds the last
    forecast against how the run really ended."""
    thread, client, clock = served
    _waves(client, clock, "told")
    body = client.get("/v1/runs/told/forecast").json()
    metrics = client.get("/metrics").text
    assert 'rollout_sidecar_forecast_finished{band="p50",run_id="told"} 20.0' in metrics
    assert 'rollout_sidecar_forecast_eta_seconds{band="p90",run_id="told"} 75.0' in metrics
    assert 'rollout_sidecar_forecast_budget_for_all_seconds{run_id="told"} 90.0' in metrics
    page = client.get("/v1/runs/told/page").json()  # the run page draws the same forecast
    assert page["forecast"] == body  # recomputed or not (3 s apart), the same answer on a still run
    assert {tuple(point) for point in page["forecast_history"]} == {(T0 + 25.0, 8, 20, 20, 20)}
    assert [group["task_index"] for group in page["groups"]] == [2]
    run = thread.service.ingestor.runs["told"]
    live = live_metrics(run, clock.now)
    assert live[PREFIX + "forecast/finished_p50"] == 20 and live[PREFIX + "forecast/cut_off_p50"] == 4
    _post(client, "told", [_done(8 + i, T0 + 30.0) for i in range(4)] + [{"kind": "run_ended"}])
    report = client.get("/report", params={"run_id": "told"}).json()["forecast"]
    actual = {"finished": 12, "drained": 0}
    assert report == {"last": body, "actual": actual, "error": 8, "inside_p10_p90": False}
    assert client.get("/v1/runs/told/forecast").json() == body  # the last live one, held


def test_a_run_ended_before_any_forecast_says_so(served: Any) -> None:
    _, client, clock = served
    _waves(client, clock, "silent")
    _post(client, "silent", [{"kind": "run_ended"}])
    body = client.get("/v1/runs/silent/forecast").json()
    assert body["basis"]["reason"] == "the run ended before a forecast was made"
    assert body["by_budget_end"] is None and body["finished"] == 8
    assert client.get("/report", params={"run_id": "silent"}).json()["forecast"] is None


def test_open_groups_survive_a_snapshot() -> None:
    groups = OpenGroups()
    for rollout in range(3):
        groups.apply(StartedFact(T0, 0, "t", rollout, 0, T0 + rollout))
    restored = OpenGroups.from_snapshot(groups.to_snapshot())
    assert restored.blocking(T0 + 10, 5, {"t": 4}) == groups.blocking(T0 + 10, 5, {"t": 4})
    assert restored.blocking(T0 + 10, 5, None)[0]["in_flight"] == 3
