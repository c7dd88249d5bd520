"""HealthReducer: duplicate pass, task reduction, summary and rows, from digests built by hand.

The vector-driven class rebuilds each example's digests from its expected rows (which carry
everything but the statistics) and checks that the reducer reproduces the rows byte for byte
and every summary field that depends only on verdicts, whatever the arrival order.
"""

from __future__ import annotations

import json
import pickle
import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from health.compact import compact_digest, expand_digest
from health.process_tuning import stepping_aside
from health.reduce import HealthReducer
from health.registry import ROLLOUT_CHECK_IDS
from health.types import Finding, RolloutDigest


def make_digest(
    task: int | str,
    rollout: int | str = 0,
    *,
    stage: int | str | None = None,
    verdict: str = "healthy",
    findings: list[Finding] | None = None,
    unobserved: list[str] | None = None,
    ordinal: int = 0,
    **stats: Any,
) -> RolloutDigest:
    return RolloutDigest(
        task_index=task,
        rollout_index=rollout,
        stage_index=stage,
        rollout_id=f"{task}-{rollout}",
        verdict=verdict,  # type: ignore[arg-type]
        findings=findings or [],
        unobserved=unobserved or [],
        capture_observed=stats.pop("capture_observed", True),
        ordinal=ordinal,
        **stats,
    )


def digests_from_rows(rows_path: Path) -> list[RolloutDigest]:
    """Preliminary digests behind expected rows: duplicate findings removed, verdicts re-derived."""
    digests = []
    for position, line in enumerate(rows_path.read_bytes().splitlines()):
        row = orjson.loads(line)
        subject = {"_ng_task_index": row["_ng_task_index"], "_ng_rollout_index": row["_ng_rollout_index"]}
        findings = [
            Finding(check=f["check"], subject=subject, locator=f.get("locator"), detail=f["detail"])
            for f in row["findings"]
            if f["check"] != "rollout_duplicate_identity"
        ]
        verdict = "unhealthy" if findings else "unobserved" if row["unobserved"] else "healthy"
        digests.append(
            RolloutDigest(
                task_index=row["_ng_task_index"],
                rollout_index=row["_ng_rollout_index"],
                stage_index=row.get("stage_index"),
                rollout_id=row["rollout_id"],
                verdict=verdict,
                findings=findings,
                unobserved=row["unobserved"],
                capture_observed=False,
                ordinal=position,
            )
        )
    return digests


def example_dirs(root: Path) -> list[Path]:
    return sorted(path for path in (root / "health").iterdir() if path.is_dir())


class TestFromVectors:
    @pytest.mark.parametrize("packed", [False, True])
    def test_rows_and_verdict_summary_match_in_any_order(self, spec_examples: Path, packed: bool) -> None:
        rng = random.Random(7)
        for example in example_dirs(spec_examples):
            args = json.loads((example / "args.json").read_text())
            expected_rows = (example / "expected" / "rollout_verdicts.jsonl").read_bytes()
            expected = orjson.loads((example / "expected" / "quality_summary.json").read_bytes())
            digests = digests_from_rows(example / "expected" / "rollout_verdicts.jsonl")
            rng.shuffle(digests)
            reducer = HealthReducer(args["ignored_checks"], packed=packed)
            for digest in digests:
                reducer.add(digest)
            assert b"".join(reducer.iter_verdict_lines()) == expected_rows, example.name
            summary = reducer.summary()
            run, want = summary["run"], expected["run"]
            assert run["verdicts"] == want["verdicts"], example.name
            assert run["ignored_checks"] == want["ignored_checks"]
            assert run["artifacts"]["records"] == want["artifacts"]["records"]
            for check in (*ROLLOUT_CHECK_IDS, "task_consistently_unhealthy"):
                assert run["artifacts"]["coverage"][check] == want["artifacts"]["coverage"][check], check
            for check in ROLLOUT_CHECK_IDS:
                assert run["issues"][check] == want["issues"][check], (example.name, check)
            assert list(summary["tasks"]) == list(expected["tasks"]), example.name
            for key, task in summary["tasks"].items():
                counts = {k: task[k] for k in ("repeats", "healthy", "unhealthy", "unobserved")}
                assert counts == {k: expected["tasks"][key][k] for k in counts}, (example.name, key)


class TestDuplicates:
    def test_same_identity_marks_every_copy_unhealthy_with_trailing_finding(self) -> None:
        hollow = Finding(check="agent_turn_hollow", subject={}, locator={"turn": 1}, detail={"reason": "x"})
        reducer = HealthReducer()
        reducer.add(make_digest(1, 0, ordinal=0))
        reducer.add(make_digest(1, 0, ordinal=1, verdict="unhealthy", findings=[hollow]))
        reducer.add(make_digest(1, 0, stage=0, ordinal=2))
        rows = [orjson.loads(line) for line in reducer.iter_verdict_lines()]
        assert [row.get("stage_index") for row in rows] == [0, None, None]
        assert rows[0]["verdict"] == "healthy"
        assert rows[1]["findings"] == [
            {"check": "rollout_duplicate_identity", "detail": {"duplicate_count": 2}}
        ]
        assert [f["check"] for f in rows[2]["findings"]] == [
            "agent_turn_hollow",
            "rollout_duplicate_identity",
        ]
        assert rows[1]["verdict"] == rows[2]["verdict"] == "unhealthy"
        summary = reducer.summary()
        assert summary["run"]["issues"]["rollout_duplicate_identity"] == 2
        assert summary["run"]["verdicts"] == {"healthy": 1, "unhealthy": 2, "unobserved": 0}
        digests = reducer.digests()
        assert [d.ordinal for d in digests] == [0, 1, 2]
        assert digests[0].verdict == "unhealthy"
        assert digests[0].findings[-1].subject == {"_ng_task_index": 1, "_ng_rollout_index": 0}

    @pytest.mark.parametrize("group_size", [1, 3, 31, 32, 33, 80])
    @pytest.mark.parametrize("packed", [False, True])
    def test_duplicate_counts_equal_a_count_over_every_identity(self, group_size: int, packed: bool) -> None:
        """Small groups are scanned, large ones indexed: both count exactly what a full identity
        count gives, whatever the arrival order, stages and index types, packed or not, and
        after a pickle round trip (a snapshot)."""
        rng = random.Random(group_size)
        tasks: list[int | str] = [0, 1, "1", 2]
        rollouts: list[int | str] = [0, 1, "0", *range(group_size)]
        stages: list[int | None] = [None, None, 0, 1]
        digests = []
        for ordinal in range(4 * group_size + 5):
            task, rollout, stage = rng.choice(tasks), rng.choice(rollouts), rng.choice(stages)
            digests.append(make_digest(task, rollout, stage=stage, ordinal=ordinal))
        counts: dict[tuple[Any, Any, Any], int] = {}
        for digest in digests:
            key = (digest.stage_index, digest.task_index, digest.rollout_index)
            counts[key] = counts.get(key, 0) + 1
        reducer = HealthReducer(packed=packed)
        for digest in digests[: len(digests) // 2]:
            reducer.add(digest)
        reducer = pickle.loads(pickle.dumps(reducer))
        for digest in digests[len(digests) // 2 :]:
            reducer.add(digest)
        for digest in reducer.digests():
            count = counts[(digest.stage_index, digest.task_index, digest.rollout_index)]
            marked = [f.detail for f in digest.findings if f.check == "rollout_duplicate_identity"]
            assert marked == ([{"duplicate_count": count}] if count >= 2 else [])
        duplicates = sum(count for count in counts.values() if count >= 2)
        assert reducer.summary()["run"]["issues"]["rollout_duplicate_identity"] == duplicates

    def test_ignored_duplicate_check_skips_the_pass(self) -> None:
        reducer = HealthReducer(["rollout_duplicate_identity"])
        reducer.add(make_digest(1, 0, ordinal=0))
        reducer.add(make_digest(1, 0, ordinal=1))
        assert reducer.summary()["run"]["verdicts"]["healthy"] == 2
        assert reducer.summary()["run"]["artifacts"]["coverage"]["rollout_duplicate_identity"]["ignored"] == 2

    def test_int_and_string_indices_are_distinct(self) -> None:
        reducer = HealthReducer()
        reducer.add(make_digest(1, 0, ordinal=0))
        reducer.add(make_digest("1", 0, ordinal=1))
        assert reducer.summary()["run"]["verdicts"]["healthy"] == 2


class TestPacked:
    def test_digests_packing_cannot_hold_stay_tuples_and_report_the_same(self) -> None:
        """A task group mixing packable digests with ones MessagePack cannot hold exactly (an
        ordinal beyond 64 bits), with string indices, stages and unobserved checks out of registry
        order, across blob boundaries, reports exactly what an unpacked reducer does, pickled or not."""
        digests = []
        for ordinal in range(75):
            digest = make_digest(1, ordinal % 40, ordinal=ordinal)
            if ordinal % 10 == 3:
                digest = digest.model_copy(update={"ordinal": 2**70 + ordinal})
            elif ordinal % 10 == 6:
                digest = make_digest(1, str(ordinal % 40), stage=ordinal % 3 or None, ordinal=ordinal)
            elif ordinal % 10 == 8:
                digest = make_digest(1, ordinal, unobserved=["agent_turn_hollow", "model_call_failed"])
                digest = digest.model_copy(update={"ordinal": ordinal})
            digests.append(digest)
        digests.append(make_digest(2, 0, ordinal=2**70))  # a task whose only digest cannot be packed
        plain, packed = HealthReducer(), HealthReducer(packed=True)
        for digest in digests:
            plain.add(digest)
            packed.add(digest)
        for reducer in (packed, pickle.loads(pickle.dumps(packed))):
            assert len(reducer) == len(plain) == 76
            assert list(reducer.iter_verdict_lines()) == list(plain.iter_verdict_lines())
            assert reducer.summary_bytes() == plain.summary_bytes()
            assert reducer.digests() == plain.digests()
            assert reducer.close_task(1) == plain.close_task(1)


class TestTasks:
    def test_close_task_reports_flags_and_reopens(self) -> None:
        reducer = HealthReducer()
        bad = Finding(check="agent_turn_hollow", subject={}, detail={})
        reducer.add(make_digest(3, 0, verdict="unhealthy", findings=[bad], policy_calls_observed=True))
        assert [f.check for f in reducer.close_task(3)] == ["task_no_successful_model_calls"]
        reducer.add(
            make_digest(3, 1, verdict="unhealthy", findings=[bad], ordinal=1, policy_calls_observed=True)
        )
        findings = reducer.close_task(3)
        assert [f.check for f in findings] == [
            "task_consistently_unhealthy",
            "task_no_successful_model_calls",
        ]
        assert findings[0].detail == {"computable_repeats": 2}
        assert findings[0].subject == {"_ng_task_index": 3}
        assert findings[1].detail == {"repeats": 2}
        reducer.add(make_digest(3, 2, ordinal=2, policy_calls_observed=True, successful_model_calls=1))
        assert reducer.close_task(3) == []
        assert reducer.close_task("3") == []

    def test_task_key_collision_keeps_first_position_with_string_counts(self) -> None:
        reducer = HealthReducer()
        reducer.add(make_digest(10, 0, ordinal=0))
        reducer.add(make_digest(2, 0, ordinal=1))
        reducer.add(make_digest("10", 0, ordinal=2, verdict="unobserved", unobserved=["model_call_failed"]))
        summary = reducer.summary()
        assert list(summary["tasks"]) == ["10", "2"]
        assert summary["tasks"]["10"]["unobserved"] == 1
        assert summary["run"]["artifacts"]["coverage"]["task_consistently_unhealthy"]["unobserved"] == 3

    def test_summaries_between_adds_keep_the_tasks_map_order(self) -> None:
        """The task order kept across summaries equals one stable sort of every task seen."""
        import pickle

        from health.report import task_sort_key

        rng = random.Random(12)
        tasks: list[int | str] = [
            rng.choice([rng.randint(0, 120), str(rng.randint(0, 120))]) for _ in range(300)
        ]
        reducer = HealthReducer()
        for ordinal, task in enumerate(tasks):
            reducer.add(make_digest(task, ordinal % 3, ordinal=ordinal))
            if ordinal % 37 == 0:
                reducer.summary()
            if ordinal == 150:
                reducer = pickle.loads(pickle.dumps(reducer))
        first_seen = list(dict.fromkeys(tasks))
        expected = [str(task) for task in sorted(first_seen, key=task_sort_key)]
        summary = reducer.summary()
        assert list(summary["tasks"]) == list(dict.fromkeys(expected))
        once = HealthReducer()
        for ordinal, task in enumerate(tasks):
            once.add(make_digest(task, ordinal % 3, ordinal=ordinal))
        assert reducer.summary_bytes() == once.summary_bytes()

    @pytest.mark.parametrize("seed", range(6))
    @pytest.mark.parametrize("packed", [False, True])
    def test_the_summary_tasks_equal_reduce_task_over_the_post_duplicate_digests(
        self, seed: int, packed: bool
    ) -> None:
        """The summary tallies task groups straight from the digests (distinct-repeat groups
        without the collapse); it equals ``reduce_task`` over every group's post-duplicate
        verdicts: collisions across stages, duplicates, ``1`` / ``True`` / ``"1"`` indices, both
        checks ignored or not."""
        from health.tasks import RepeatInput, reduce_task, task_findings

        rng = random.Random(seed)
        ignored = rng.choice([(), ("task_consistently_unhealthy",), ("task_no_successful_model_calls",)])
        reducer = HealthReducer(ignored, packed=packed)
        for ordinal in range(240):
            reducer.add(
                make_digest(
                    rng.choice([*range(40), "t"]),
                    rng.choice([0, 1, 2, 3, 4, 5, True, "1"]),
                    stage=rng.choice([None, None, 0, 1, 2]),
                    verdict=rng.choice(["healthy", "healthy", "unhealthy", "unobserved"]),
                    ordinal=ordinal,
                    policy_calls_observed=rng.random() < 0.8,
                    successful_model_calls=rng.choice([0, 0, 1, 2]),
                )
            )
        groups: dict[Any, list[RepeatInput]] = {}
        for digest in reducer.digests():
            groups.setdefault(digest.task_index, []).append(
                RepeatInput(
                    digest.rollout_index,
                    digest.verdict,
                    digest.policy_calls_observed,
                    digest.successful_model_calls,
                )
            )
        outcomes = [reduce_task(task, members, reducer.ignored_checks) for task, members in groups.items()]
        by_task = {(type(outcome.task_index), outcome.task_index): outcome for outcome in outcomes}
        assert {
            (type(found.task_index), found.task_index): found for found in reducer.task_outcomes()
        } == by_task
        summary = reducer.summary()
        assert {str(outcome.task_index): outcome for outcome in outcomes}.keys() == summary["tasks"].keys()
        for outcome in outcomes:
            assert summary["tasks"][str(outcome.task_index)] == {
                "repeats": outcome.repeats,
                "healthy": outcome.healthy,
                "unhealthy": outcome.unhealthy,
                "unobserved": outcome.unobserved,
                "flags": list(outcome.flags),
            }
        coverage = summary["run"]["artifacts"]["coverage"]
        for check, state in (
            ("task_consistently_unhealthy", "consistently_unhealthy"),
            ("task_no_successful_model_calls", "no_successful_calls"),
        ):
            states = [getattr(outcome, state) for outcome in outcomes]
            assert coverage[check] == {
                key: states.count(key) for key in ("evaluated", "unobserved", "ignored")
            }
            flagged = sum(check in outcome.flags for outcome in outcomes)
            assert summary["run"]["issues"][check] == flagged
            task = outcomes[0].task_index
            assert reducer.close_task(task) == task_findings(outcomes[0])

    def test_disagreeing_copies_collapse_to_unobserved(self) -> None:
        reducer = HealthReducer()
        reducer.add(make_digest(0, 0, stage=0, ordinal=0))
        reducer.add(make_digest(0, 0, stage=1, ordinal=1, verdict="unhealthy"))
        task = reducer.summary()["tasks"]["0"]
        assert (task["repeats"], task["unobserved"]) == (1, 1)


class TestSummary:
    @pytest.mark.parametrize("packed", [False, True])
    def test_extend_equals_adding_one_digest_at_a_time(self, packed: bool) -> None:
        """``extend`` sums a batch's statistics over its columns; the state it reaches is the
        state ``add_compact`` reaches digest by digest."""
        rng = random.Random(7)
        bad = Finding(check="agent_turn_hollow", subject={}, detail={})
        digests = []
        for ordinal in range(400):
            errors = rng.choice([0, 0, 0, 1, 3])
            digests.append(
                compact_digest(
                    make_digest(
                        rng.choice([0, 1, 2, "t", 3]),
                        rng.choice([0, 1, 2, "1"]),
                        stage=rng.choice([None, None, 1]),
                        verdict="unhealthy" if errors else rng.choice(["healthy", "unobserved"]),
                        findings=[bad] * rng.choice([0, 0, 1, 2]),
                        unobserved=rng.choice(
                            [[], [], ["model_call_failed"], ["model_call_failed", "agent_turn_hollow"]]
                        ),
                        ordinal=ordinal,
                        capture_observed=rng.random() < 0.7,
                        policy_calls_observed=rng.random() < 0.8,
                        model_calls=rng.randint(0, 5),
                        successful_model_calls=rng.randint(0, 3),
                        model_call_errors=errors,
                        errors_by_status={"500": errors, "429": 1} if errors else {},
                        ended_on_error=bool(errors) and rng.random() < 0.5,
                        duplicated_calls=rng.choice([0, 0, 2]),
                        transcript_prompt_tokens=rng.randint(0, 10**6),
                        transcript_completion_tokens=rng.randint(0, 10**4),
                        capture_prompt_tokens=rng.randint(0, 10**6),
                        capture_completion_tokens=rng.randint(0, 10**4),
                    )
                )
            )
        one_by_one = HealthReducer(packed=packed)
        for digest in digests:
            one_by_one.add_compact(digest)
        batched = HealthReducer(packed=packed)
        batched.extend(digests[:150])
        batched.extend([])
        batched.extend(iter(digests[150:]))
        assert batched.__getstate__() == one_by_one.__getstate__()
        assert batched.summary_bytes() == one_by_one.summary_bytes()

    def test_empty_run(self) -> None:
        reducer = HealthReducer()
        assert list(reducer.iter_verdict_lines()) == []
        summary = reducer.summary()
        assert summary["tasks"] == {}
        assert list(summary["run"]) == ["ignored_checks", "artifacts", "verdicts", "issues", "stats"]
        assert not reducer.summary_bytes().endswith(b"\n")

    def test_statistics_are_summed_and_statuses_sorted_as_strings(self) -> None:
        reducer = HealthReducer("model_call_failed, agent_turn_hollow")
        reducer.add(make_digest(0, model_call_errors=2, errors_by_status={"500": 1, "unknown": 1}))
        reducer.add(
            make_digest(1, ordinal=1, model_call_errors=1, errors_by_status={"1000": 1}, ended_on_error=True)
        )
        reducer.add(
            make_digest(2, ordinal=2, duplicated_calls=3, transcript_prompt_tokens=5, capture_prompt_tokens=4)
        )
        stats = reducer.summary()["run"]["stats"]
        assert stats["model_call_errors"] == {
            "total": 3,
            "by_status": {"1000": 1, "500": 1, "unknown": 1},
            "rollouts_affected": 2,
            "ended_on_error": 1,
        }
        assert stats["duplicated_calls"] == {"replayed": 3, "rollouts": 1}
        assert stats["tokens"] == {"prompt": 5, "completion": 0, "capture_prompt": 4, "capture_completion": 0}
        assert reducer.summary()["run"]["ignored_checks"] == ["agent_turn_hollow", "model_call_failed"]

    def test_unknown_ignored_check_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="Unknown rollout health check\\(s\\): nope"):
            HealthReducer(["nope"])


class TestCompact:
    def test_round_trip_preserves_the_digest(self) -> None:
        finding = Finding(
            check="model_call_failed",
            subject={"_ng_task_index": "t", "_ng_rollout_index": 2},
            locator={"call_id": "c1"},
            detail={"status": 500, "error_category": None, "terminal": True},
        )
        digest = make_digest(
            "t",
            2,
            stage=1,
            verdict="unhealthy",
            findings=[finding],
            ordinal=9,
            unobserved=["rollout_token_count_mismatch", "model_call_runaway_generation"],
            policy_calls_observed=True,
            model_calls=3,
            errors_by_status={"500": 1},
            model_call_errors=1,
        )
        assert expand_digest(compact_digest(digest)) == digest

    @pytest.mark.parametrize("duplicates", [0, 3])
    def test_expanded_digest_is_the_object_model_construct_builds(self, duplicates: int) -> None:
        finding = Finding(check="agent_turn_hollow", subject={}, locator={"turn": 1}, detail={"reason": "x"})
        for findings in ([], [finding]):
            digest = make_digest(4, "r", verdict="unhealthy" if findings else "healthy", findings=findings)
            expanded = expand_digest(compact_digest(digest), duplicates)
            expected = RolloutDigest.model_construct(
                **{name: getattr(expanded, name) for name in expanded.__dict__}
            )
            assert list(expanded.__dict__) == list(RolloutDigest.model_fields)
            assert expanded.__dict__ == expected.__dict__
            assert expanded.model_fields_set == expected.model_fields_set == set(RolloutDigest.model_fields)
            assert expanded.__pydantic_extra__ is expected.__pydantic_extra__ is None
            assert expanded.__pydantic_private__ is expected.__pydantic_private__ is None
            assert expanded.model_dump_json() == expected.model_dump_json()
            assert RolloutDigest.model_validate(expanded.model_dump()) == expanded
            checks = [f.check for f in expanded.findings]
            assert checks == [f.check for f in findings] + ["rollout_duplicate_identity"] * (duplicates >= 2)
            assert expanded.verdict == ("unhealthy" if findings or duplicates else "healthy")

    def test_unobserved_out_of_registry_order_is_kept_verbatim(self) -> None:
        digest = make_digest(0, unobserved=["model_call_failed", "agent_turn_hollow"], verdict="unobserved")
        reducer = HealthReducer()
        reducer.add(digest)
        row = orjson.loads(next(reducer.iter_verdict_lines()))
        assert row["unobserved"] == ["model_call_failed", "agent_turn_hollow"]
        assert reducer.digests()[0].unobserved == ["model_call_failed", "agent_turn_hollow"]


class _ListStore:
    """A ``GroupStore`` in a list (the service's is a file: tests/sidecar/test_closed_groups.py)."""

    def __init__(self) -> None:
        self.blobs: list[bytes] = []

    def put(self, blob: bytes) -> int:
        self.blobs.append(blob)
        return len(self.blobs) - 1

    def get(self, reference: int) -> bytes:
        return self.blobs[reference]


class TestSpill:
    @pytest.mark.parametrize("packed", [False, True])
    def test_spilled_groups_report_and_reopen_exactly_like_resident_ones(self, packed: bool) -> None:
        """Groups spilled as their tasks close, late repeats (duplicates too) re-opening them, and
        a pickle round trip in between: rows, summary and task findings equal a plain reducer's."""
        rng = random.Random(5)
        plain, spilled, store = HealthReducer(), HealthReducer(packed=packed), _ListStore()
        spilled.spill_to(store)
        tasks: list[int | str] = [*range(40), "7", "x"]
        for ordinal in range(400):
            task = rng.choice(tasks)
            digest = make_digest(task, rng.randint(0, 5), stage=rng.choice([None, None, 1]), ordinal=ordinal)
            plain.add(digest)
            spilled.add(digest)
            if ordinal % 3 == 0:
                closing = rng.choice(tasks)
                assert spilled.close_task(closing) == plain.close_task(closing)
                spilled.spill(closing)
            if ordinal == 200:
                spilled = pickle.loads(pickle.dumps(spilled))
                spilled.spill_to(store)
        assert sum(type(group) is int for group in spilled._tasks.values()) > 5
        assert list(spilled.iter_verdict_lines()) == list(plain.iter_verdict_lines())
        assert spilled.summary_bytes() == plain.summary_bytes()
        assert spilled.digests() == plain.digests()

    def test_without_a_store_nothing_is_spilled(self) -> None:
        reducer = HealthReducer(packed=True)
        reducer.add(make_digest(1, 0, ordinal=0))
        assert reducer.spill(1) is False and reducer.spill(2) is False
        store = _ListStore()
        reducer.spill_to(store)
        assert reducer.spill(1) is True and reducer.spill(1) is False  # already spilled
        assert len(store.blobs) == 1


class TestSteppingAside:
    def test_a_cuts_report_steps_aside_every_256_tasks_and_reports_the_same(self) -> None:
        """The service's reads pause at ``yield_point`` while ingest has work; the loops over every
        task reach one every 256 tasks, and the report is the same with or without pauses."""
        reducer = HealthReducer(packed=True)
        for task in range(1000):
            reducer.add(make_digest(task, ordinal=task))
        pauses: list[int] = []
        with stepping_aside(lambda: pauses.append(1)):
            summary = reducer.cut().summary_bytes()
            lines = list(reducer.cut().iter_verdict_lines())
        assert len(pauses) >= 3 * (1000 // 256)  # the task order, the entries, the verdict lines
        assert summary == reducer.cut().summary_bytes()
        assert lines == list(reducer.cut().iter_verdict_lines())
