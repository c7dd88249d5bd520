"""Task reduction: repeat collapse and both task checks."""

from __future__ import annotations

from health.tasks import RepeatInput, reduce_task, task_findings

NONE: frozenset[str] = frozenset()


def _r(rollout: int | str, verdict: str, policy: bool = True, successful: int = 0) -> RepeatInput:
    return RepeatInput(rollout, verdict, policy, successful)  # type: ignore[arg-type]


class TestRepeats:
    def test_copies_collapse_by_rollout_index(self) -> None:
        outcome = reduce_task(
            0, [_r(0, "healthy"), _r(0, "healthy"), _r(1, "unhealthy"), _r("1", "healthy")], NONE
        )
        assert (outcome.repeats, outcome.healthy, outcome.unhealthy, outcome.unobserved) == (3, 2, 1, 0)

    def test_disagreeing_copies_are_unobserved(self) -> None:
        outcome = reduce_task(0, [_r(0, "healthy"), _r(0, "unhealthy")], NONE)
        assert (outcome.repeats, outcome.unobserved) == (1, 1)


class TestConsistentlyUnhealthy:
    def test_needs_two_computable_repeats(self) -> None:
        one = reduce_task(0, [_r(0, "unhealthy"), _r(1, "unobserved")], NONE)
        assert one.consistently_unhealthy == "unobserved"
        assert "task_consistently_unhealthy" not in one.flags
        two = reduce_task(0, [_r(0, "unhealthy"), _r(1, "unhealthy"), _r(2, "unobserved")], NONE)
        assert two.consistently_unhealthy == "evaluated"
        assert two.flags == ("task_consistently_unhealthy", "task_no_successful_model_calls")
        assert task_findings(two)[0].detail == {"computable_repeats": 2}

    def test_one_healthy_repeat_clears_it(self) -> None:
        outcome = reduce_task(0, [_r(0, "unhealthy"), _r(1, "healthy", successful=1)], NONE)
        assert outcome.consistently_unhealthy == "evaluated"
        assert outcome.flags == ()

    def test_ignored(self) -> None:
        outcome = reduce_task(
            0, [_r(0, "unhealthy"), _r(1, "unhealthy")], frozenset({"task_consistently_unhealthy"})
        )
        assert outcome.consistently_unhealthy == "ignored"
        assert outcome.flags == ("task_no_successful_model_calls",)


class TestNoSuccessfulCalls:
    def test_every_repeat_must_observe_policy_calls(self) -> None:
        outcome = reduce_task(0, [_r(0, "healthy"), _r(1, "healthy", policy=False)], NONE)
        assert outcome.no_successful_calls == "unobserved"
        copies = reduce_task(0, [_r(0, "healthy"), _r(0, "healthy", policy=False)], NONE)
        assert copies.no_successful_calls == "unobserved"

    def test_max_over_copies_counts(self) -> None:
        outcome = reduce_task(7, [_r(0, "healthy"), _r(0, "healthy", successful=2)], NONE)
        assert (outcome.no_successful_calls, outcome.flags) == ("evaluated", ())

    def test_fires_with_subject_and_repeat_count(self) -> None:
        outcome = reduce_task("t", [_r(0, "healthy"), _r(1, "healthy")], NONE)
        findings = task_findings(outcome)
        assert [f.check for f in findings] == ["task_no_successful_model_calls"]
        assert findings[0].subject == {"_ng_task_index": "t"}
        assert findings[0].detail == {"repeats": 2}
        assert findings[0].locator is None

    def test_ignored(self) -> None:
        outcome = reduce_task(0, [_r(0, "healthy")], frozenset({"task_no_successful_model_calls"}))
        assert (outcome.no_successful_calls, outcome.flags) == ("ignored", ())
