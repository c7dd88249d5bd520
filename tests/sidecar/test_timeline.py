"""The timeline alone: its grid, the 2:1 merge, its bounds, the freeze and exact rebuilding."""

from __future__ import annotations

import math
import pickle
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sidecar.state.timeline as timeline_module
from dispatcher_client.client import progress_event
from sidecar.http.json_bodies import dumps_json
from sidecar.ingest.events import EventBatch
from sidecar.journal import pack, unpack
from sidecar.state.inflight import InflightRegistry
from sidecar.state.timeline import MAX_POINTS, Timeline, TimelineSample

from .service_support import IngestHarness, generate_run

ORIGIN = 1_000.0


@dataclass
class Run:
    """A run the timeline samples: counters moved by the test, gauges derived from the time."""

    started: int = 0
    completed: int = 0
    failed: int = 0
    in_flight: int = 0
    deadline: float | None = ORIGIN + 100.0

    def timeline_samples(self, times: Sequence[float]) -> list[TimelineSample]:
        return [
            TimelineSample(
                self.started,
                self.completed,
                self.failed,
                0,
                self.in_flight,
                int(at - ORIGIN) % 7,  # a gauge that moves with time alone
                None if not self.completed else float(self.completed),
                None if self.deadline is None else self.deadline - at,
                self.completed,
                self.failed,
            )
            for at in times
        ]


def _feed(timeline: Timeline, run: Run, facts: Sequence[tuple[float, str]]) -> None:
    """Apply ``(time, kind)`` facts as the run state does: advance, then change the state."""
    for at, kind in facts:
        timeline.advance(at, run)
        if kind == "completed":
            run.completed += 1
            run.in_flight -= 1
        elif kind == "failed":
            run.failed += 1
            run.in_flight -= 1
        else:
            run.started += 1
            run.in_flight += 1


def _body(timeline: Timeline, run: Run) -> tuple[list[float], dict[str, list[Any]]]:
    return timeline.columns(run)


class TestGrid:
    def test_points_close_at_their_end_with_the_state_the_next_fact_finds(self) -> None:
        timeline, run = Timeline(ORIGIN), Run()
        _feed(
            timeline, run, [(ORIGIN + 0.2, "started"), (ORIGIN + 0.5, "started"), (ORIGIN + 1.5, "completed")]
        )
        _feed(timeline, run, [(ORIGIN + 3.25, "failed")])
        t, series = _body(timeline, run)
        # points end at 1, 2, 3 (closed), then the open one as of the last fact
        assert t == [ORIGIN + 1, ORIGIN + 2, ORIGIN + 3, ORIGIN + 3.25]
        assert series["started"] == [2, 0, 0, 0]
        assert series["completed"] == [0, 1, 0, 0]
        assert series["failed"] == [0, 0, 0, 1]
        assert series["in_flight"] == [2, 1, 1, 0]
        assert series["stragglers"] == [1, 2, 3, 3]  # sampled at each point's own end
        assert series["seconds_left"] == [99.0, 98.0, 97.0, 96.75]
        assert series["drain_margin_s"] == [None, 1.0, 1.0, 1.0]
        assert series["rollouts_per_hour"] == [0.0, 3600.0, 0.0, 0.0]
        assert series["healthy"] == [0, 1, 1, 1] and series["unhealthy"] == [0, 0, 0, 1]

    def test_a_point_holds_facts_from_its_start_up_to_but_excluding_its_end(self) -> None:
        timeline, run = Timeline(ORIGIN), Run()
        _feed(timeline, run, [(ORIGIN + 1.0, "started"), (ORIGIN + 2.0, "started")])
        t, series = _body(timeline, run)
        assert t == [ORIGIN + 1, ORIGIN + 2, ORIGIN + 2]
        assert series["started"] == [0, 1, 1]
        assert series["rollouts_per_hour"][-1] is None  # an open point of no length has no rate

    def test_time_going_backwards_counts_into_the_open_point(self) -> None:
        timeline, run = Timeline(ORIGIN), Run()
        _feed(timeline, run, [(ORIGIN + 2.5, "started"), (ORIGIN + 1.2, "started"), (ORIGIN - 5, "started")])
        t, series = _body(timeline, run)
        assert t == [ORIGIN + 1, ORIGIN + 2, ORIGIN + 2.5]
        assert series["started"] == [0, 0, 3]

    def test_a_run_without_a_budget_has_no_seconds_left(self) -> None:
        timeline, run = Timeline(ORIGIN), Run(deadline=None)
        _feed(timeline, run, [(ORIGIN + 1.5, "started")])
        assert _body(timeline, run)[1]["seconds_left"] == [None, None]

    def test_a_fresh_timeline_has_its_open_point_at_the_origin(self) -> None:
        t, series = _body(Timeline(ORIGIN), Run())
        assert t == [ORIGIN] and series["started"] == [0] and series["rollouts_per_hour"] == [None]

    @pytest.mark.parametrize(
        ("options", "field"),
        [
            ({"bucket_s": 0.0}, "bucket_s"),
            ({"max_points": 1}, "max_points"),
            ({"origin": float("nan")}, "origin"),
        ],
    )
    def test_bad_settings_are_refused_naming_the_setting(self, options: dict[str, Any], field: str) -> None:
        origin = options.pop("origin", ORIGIN)
        with pytest.raises(ValueError, match=field):
            Timeline(origin, **options)


class TestMerging:
    def test_when_full_adjacent_points_merge_two_to_one_and_the_width_doubles(self) -> None:
        facts = [(ORIGIN + 0.5 + second, "started") for second in range(20)]
        small, run_small = Timeline(ORIGIN, max_points=8), Run()
        _feed(small, run_small, facts)
        wide, run_wide = Timeline(ORIGIN, max_points=64), Run()
        _feed(wide, run_wide, facts)
        t_small, merged = _body(small, run_small)
        t_wide, fine = _body(wide, run_wide)
        assert small.bucket_s == 4.0 and wide.bucket_s == 1.0
        assert len(t_small) == 5 <= 8 and len(t_wide) == 20
        # counts summed over the four merged points, gauges those of the last of them
        assert merged["started"] == [sum(fine["started"][i : i + 4]) for i in range(0, 20, 4)]
        closed = [3, 7, 11, 15]
        assert t_small[:4] == [t_wide[i] for i in closed]
        for name in ("in_flight", "stragglers", "seconds_left"):
            assert merged[name][:4] == [fine[name][i] for i in closed]
        assert t_small[-1] == t_wide[-1] and merged["in_flight"][-1] == fine["in_flight"][-1]
        assert merged["rollouts_per_hour"] == [0.0] * 5

    def test_a_long_gap_merges_first_then_fills_the_empty_points(self) -> None:
        timeline, run = Timeline(ORIGIN, max_points=16), Run()
        _feed(timeline, run, [(ORIGIN + 0.5, "started"), (ORIGIN + 100.0, "completed")])
        t, series = _body(timeline, run)
        assert timeline.bucket_s == 8.0  # 100 s needs 13 points of 8 s
        assert t == [ORIGIN + 8 * (k + 1) for k in range(12)] + [ORIGIN + 100.0]
        assert series["started"] == [1] + [0] * 12
        assert series["completed"] == [0] * 12 + [1]
        assert series["seconds_left"][:12] == [100.0 - 8 * (k + 1) for k in range(12)]

    @pytest.mark.parametrize("span_s", [600.0, 86_400.0, 30 * 86_400.0])
    def test_never_more_than_max_points_however_long_the_run(self, span_s: float) -> None:
        rng = random.Random(span_s)
        timeline, run = Timeline(ORIGIN), Run()
        times = sorted(ORIGIN + rng.uniform(0, span_s) for _ in range(20_000))
        _feed(timeline, run, [(at, rng.choice(("started", "completed", "failed"))) for at in times])
        t, series = _body(timeline, run)
        assert len(t) <= MAX_POINTS and all(len(values) == len(t) for values in series.values())
        assert timeline.bucket_s * MAX_POINTS > span_s - (times[0] - ORIGIN) or len(t) > MAX_POINTS // 2
        assert t == sorted(t)
        assert sum(series["started"]) == run.started and sum(series["completed"]) == run.completed

    def test_the_same_facts_give_the_same_timeline_at_1k_and_at_1m_facts_per_run_length(self) -> None:
        """Its size depends on the run's length, never on how many facts fed it."""
        sizes = []
        for count in (1_000, 200_000):
            timeline, run = Timeline(ORIGIN), Run()
            _feed(timeline, run, [(ORIGIN + 3600.0 * i / count, "started") for i in range(count)])
            sizes.append((timeline.closed, timeline.bucket_s, len(pack(timeline.to_snapshot()))))
        assert sizes[0] == sizes[1]

    def test_an_absurd_time_stops_growing_the_buckets_and_stays_bounded(self) -> None:
        timeline, run = Timeline(ORIGIN), Run()
        _feed(timeline, run, [(ORIGIN + 1.5, "started"), (1e300, "started"), (float("inf"), "started")])
        t, _ = _body(timeline, run)
        assert len(t) <= MAX_POINTS and timeline.bucket_s == 2.0**60


class TestFrozen:
    def test_an_ended_run_keeps_its_timeline_whatever_comes_later(self) -> None:
        timeline, run = Timeline(ORIGIN), Run()
        _feed(
            timeline, run, [(ORIGIN + 0.5, "started"), (ORIGIN + 1.5, "started"), (ORIGIN + 2.2, "completed")]
        )
        timeline.end(ORIGIN + 2.7, run)
        before = _body(timeline, run)
        assert timeline.frozen and before[0] == [ORIGIN + 1, ORIGIN + 2, ORIGIN + 2.7]
        assert before[1]["in_flight"] == [1, 2, 1]  # what was in flight at the end
        _feed(timeline, run, [(ORIGIN + 50.0, "completed"), (ORIGIN + 5000.0, "started")])
        timeline.end(ORIGIN + 6000.0, run)
        assert _body(timeline, run) == before

    def test_the_end_can_fill_the_last_slot(self) -> None:
        timeline, run = Timeline(ORIGIN, max_points=4), Run()
        timeline.end(ORIGIN + 3.5, run)
        t, _ = _body(timeline, run)
        assert t == [ORIGIN + 1, ORIGIN + 2, ORIGIN + 3, ORIGIN + 3.5] and timeline.bucket_s == 1.0

    def test_a_restored_run_without_a_timeline_starts_one_at_the_next_fact(self) -> None:
        timeline, run = Timeline(None), Run(completed=40, started=50)
        assert _body(timeline, run) == ([], {name: [] for name in timeline_module._SERIES})
        _feed(timeline, run, [(ORIGIN, "completed"), (ORIGIN + 1.5, "completed")])
        t, series = _body(timeline, run)
        assert t == [ORIGIN + 1, ORIGIN + 1.5] and series["completed"] == [1, 1]  # counted from the restore

    def test_a_restored_ended_run_without_a_timeline_keeps_none(self) -> None:
        timeline, run = Timeline(None), Run()
        timeline.freeze()
        _feed(timeline, run, [(ORIGIN, "completed")])
        timeline.end(ORIGIN + 5, run)
        assert timeline.frozen and _body(timeline, run)[0] == []


class TestExact:
    def _facts(self, seed: int) -> list[tuple[float, str]]:
        rng = random.Random(seed)
        at, facts = ORIGIN, []
        for _ in range(5_000):
            at += rng.expovariate(2.0) if rng.random() < 0.99 else rng.uniform(0, 400)
            facts.append((at - rng.uniform(0, 0.3), rng.choice(("started", "completed", "failed"))))
        return facts

    @pytest.mark.parametrize("seed", [1, 2, 3])
    def test_a_snapshotted_timeline_continues_exactly_like_an_uninterrupted_one(self, seed: int) -> None:
        facts = self._facts(seed)
        whole, run = Timeline(ORIGIN), Run()
        _feed(whole, run, facts)
        whole.end(facts[-1][0] + 1, run)
        expected = pickle.dumps(_body(whole, run))

        timeline, resumed = Timeline(ORIGIN), Run()
        cuts = sorted(random.Random(seed).sample(range(len(facts)), 5))
        for start, stop in zip([0, *cuts], [*cuts, len(facts)], strict=True):
            _feed(timeline, resumed, facts[start:stop])
            timeline = Timeline.from_snapshot(unpack(pack(timeline.to_snapshot())))  # a snapshot, a restart
        timeline.end(facts[-1][0] + 1, resumed)
        assert pickle.dumps(_body(timeline, resumed)) == expected
        assert whole.bucket_s > 1.0  # the run was long enough to merge

    def test_its_memory_is_fixed_and_small(self) -> None:
        timeline, run = Timeline(ORIGIN), Run()
        _feed(timeline, run, self._facts(4))
        assert timeline.closed <= MAX_POINTS
        assert len(pack(timeline.to_snapshot())) < 10 * 8 * MAX_POINTS + 4096


class TestRate:
    def test_completions_per_hour_over_the_span_and_over_a_window_from_a_point_boundary(self) -> None:
        timeline, run = Timeline(ORIGIN), Run()
        _feed(timeline, run, [(ORIGIN + 10.0 * k + 5, "completed") for k in range(360)])  # one per 10 s
        end = ORIGIN + 3595.0
        assert timeline.latest == end
        assert timeline.rate(run.completed) == pytest.approx(360 * 3600.0 / 3595.0)
        recent = timeline.rate(run.completed, 900.0)  # from the boundary at or before end - 900
        start = ORIGIN + timeline.bucket_s * math.floor((end - 900.0 - ORIGIN) / timeline.bucket_s)
        done_since = sum(1 for k in range(360) if ORIGIN + 10.0 * k + 5 >= start)
        assert recent == pytest.approx(done_since * 3600.0 / (end - start))
        timeline.end(None, run)  # at its latest fact: the rates stand still from then on
        assert timeline.frozen and timeline.rate(10**6) == pytest.approx(360 * 3600.0 / 3595.0)

    def test_no_time_means_no_rate(self) -> None:
        untimed = Timeline(None)
        assert untimed.rate(50) is None and untimed.rate(50, 900.0) is None
        untimed.end(None, Run(completed=50))  # ended without a single time: no timeline at all
        assert untimed.frozen and untimed.columns(Run())[0] == [] and untimed.rate(50) is None
        instant = Timeline(ORIGIN)  # a span of no length has no rate either
        assert instant.rate(3) is None


class _Clock:
    """The ingestor's clock, moved by the test: every arrival time is chosen."""

    def __init__(self) -> None:
        self.now = ORIGIN

    def __call__(self) -> float:
        return self.now


def _stamped(at: float, batch: list[dict[str, Any]]) -> tuple[float, list[dict[str, Any]]]:
    """``(at, batch)`` with every event of the batch stamped as happening ``at`` (as it arrives)."""
    timed = ("completed", "failed", "drained", "started")
    return at, [{**event, "at": at} if event["kind"] in timed else event for event in batch]


def _long_run() -> list[tuple[float, list[dict[str, Any]]]]:
    """A generated run spread over ~50 simulated minutes: every start at once, then the rest
    four events a minute, past its 40-minute budget; ``(arrival time, batch)``, each event
    stamped with its arrival (the run's start and end too)."""
    run = generate_run(num_tasks=60, repeats=3, seed=5, duplicates=False)
    starts = [
        progress_event("started", event["row"]) for event in run.events if isinstance(event.get("row"), dict)
    ]
    head = {"kind": "run_started", "plan": run.plan, "dispatch_budget_s": 2400.0, "task_timeout_s": 30.0}
    head["started_at"] = ORIGIN
    batches = [(ORIGIN, [head]), _stamped(ORIGIN + 0.5, [start for start in starts if start is not None])]
    for index in range(0, len(run.events), 4):
        batches.append(_stamped(ORIGIN + 60.0 * (index // 4 + 1), run.events[index : index + 4]))
    end = batches[-1][0] + 3.0
    batches.append((end, [{"kind": "run_ended", "ended_at": end}]))
    return batches


async def _serve(
    path: Path,
    batches: list[tuple[float, list[dict[str, Any]]]],
    *,
    snapshot_after: int | None,
    snapshots: bool,
) -> bytes:
    """Feed ``batches`` to an ingestor over ``path`` (a snapshot after ``snapshot_after`` batches),
    then return the timeline a restart rebuilds (from the snapshot + tail, or the journal alone)."""
    clock = _Clock()
    harness = IngestHarness(path)
    ingestor = await harness.start(
        clock=clock, snapshots=snapshots, snapshot_every_events=0, snapshot_every_s=0
    )
    for position, (at, batch) in enumerate(batches):
        clock.now = at
        await ingestor.submit(RUN, EventBatch.validate_python(batch))
        if position == snapshot_after:
            assert await ingestor.snapshot() is not None
    live = dumps_json(ingestor.runs[RUN].timeline_body())
    await harness.stop()
    clock.now = ORIGIN + 10**6  # a restart much later: the timeline reads no clock
    restarted = await harness.start(
        clock=clock, snapshots=snapshots, snapshot_every_events=0, snapshot_every_s=0
    )
    assert restarted.restored_seq > 0 if snapshot_after is not None else restarted.restored_seq == 0
    again = dumps_json(restarted.runs[RUN].timeline_body())
    await harness.stop()
    assert again == live
    return again


RUN = "timeline"


class TestRunState:
    async def test_the_run_timeline_is_rebuilt_exactly_from_the_journal_or_a_snapshot(
        self, tmp_path: Path
    ) -> None:
        batches = _long_run()
        reference = await _serve(tmp_path / "a" / "j.sqlite3", batches, snapshot_after=None, snapshots=False)
        mid = await _serve(
            tmp_path / "b" / "j.sqlite3", batches, snapshot_after=len(batches) // 2, snapshots=True
        )
        assert mid == reference
        body = orjson.loads(reference)
        assert body["status"] == "ended" and body["frozen"] is True
        assert body["bucket_s"] == 4.0 and len(body["t"]) <= MAX_POINTS  # ~50 minutes: merged twice

    async def test_the_series_add_up_to_the_report(self, tmp_path: Path) -> None:
        clock = _Clock()
        harness = IngestHarness(tmp_path / "j.sqlite3")
        ingestor = await harness.start(clock=clock)
        batches = _long_run()
        for at, batch in batches[:-1]:
            clock.now = at
            await ingestor.submit(RUN, EventBatch.validate_python(batch))
        run = ingestor.runs[RUN]
        live = run.timeline_body()
        assert live["status"] == "running" and live["t"][-1] == batches[-2][0]
        clock.now = batches[-1][0]
        await ingestor.submit(RUN, EventBatch.validate_python(batches[-1][1]))
        body, report = run.timeline_body(), run.report()
        series = body["series"]
        await harness.stop()
        events = report["events"]
        assert sum(series["completed"]) == events["completed"] > 0
        assert sum(series["failed"]) == sum(entry["count"] for entry in events["failed"]) > 0
        assert sum(series["drained"]) == events["drained"] > 0
        assert sum(series["started"]) == sum(len(batch) for _, batch in batches[1:2]) > 0
        assert series["healthy"][-1] == report["quality_summary"]["run"]["verdicts"]["healthy"]
        assert series["unhealthy"][-1] == report["quality_summary"]["run"]["verdicts"]["unhealthy"]
        assert series["drain_margin_s"][-1] == report["latency"]["drain_margin"]
        assert series["in_flight"][-1] == report["inflight_at_end"]["count"]
        assert series["stragglers"][-1] == report["inflight_at_end"]["stragglers"]
        assert max(series["stragglers"]) > 0  # every start at once, a 30 s timeout
        assert series["drain_margin_s"][0] is None  # before the fifth completion
        left = series["seconds_left"]
        assert left[0] > 0 > left[-1]  # the run outlived its budget
        assert body["t"][-1] == batches[-1][0] and body["ended_at"] == batches[-1][0]


class TestStragglerCounts:
    """``InflightRegistry.straggler_counts``: the timeline's straggler series (kept here, beside
    its one user): the count ``view`` gives at each time, by one pass or one sort."""

    def test_equals_the_view_at_every_time(self) -> None:
        rng = random.Random(9)
        registry = InflightRegistry()
        for index in range(300):
            registry.started((index, 0), 0, ORIGIN + rng.uniform(0, 100))
        times = [ORIGIN + step * 2.5 for step in range(60)]
        for threshold in (None, 0.0, 7.5, 30.0):
            expected = [registry.view(at, threshold).stragglers for at in times]
            assert registry.straggler_counts(times, threshold) == expected
            assert [registry.straggler_counts([at], threshold)[0] for at in times] == expected
        assert InflightRegistry().straggler_counts(times[:3], 1.0) == [0, 0, 0]


_FACT = st.tuples(
    st.floats(min_value=-2.0, max_value=40.0, allow_nan=False),
    st.sampled_from(("started", "completed", "failed")),
)


class TestMergeProperty:
    @settings(max_examples=200, deadline=None)
    @given(facts=st.lists(_FACT, max_size=120), capacity=st.integers(min_value=2, max_value=16))
    def test_a_small_timeline_is_the_wide_one_coarsened(
        self, facts: list[tuple[float, str]], capacity: int
    ) -> None:
        """Whatever the arrivals (gaps, bursts, time going back), a timeline that had to merge holds
        exactly the points of an unmerged one at every ``bucket_s`` boundary: the merge loses
        resolution, never a count or a value."""
        at, timed = ORIGIN, []
        for step, kind in facts:
            at += step
            timed.append((at, kind))
        small, wide = Timeline(ORIGIN, max_points=capacity), Timeline(ORIGIN, max_points=1 << 20)
        _feed(small, Run(), timed)
        _feed(wide, Run(), timed)
        factor = int(small.bucket_s / wide.bucket_s)
        assert small.closed <= capacity
        for small_column, wide_column in zip(small._columns, wide._columns, strict=True):
            coarse = list(wide_column)[factor - 1 :: factor][: small.closed]
            assert _exact(small_column) == _exact(coarse)


def _exact(values: Sequence[float]) -> list[float | None]:
    return [None if value != value else value for value in values]  # NaN (a null) equals itself

