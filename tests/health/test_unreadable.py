"""The digest of an unreadable line: built from its reason and position alone."""

from __future__ import annotations

from typing import Any

from health.compact import expand_digest
from health.digest import digest_line
from health.registry import ROLLOUT_CHECK_IDS
from health.unreadable import RECORD_UNREADABLE, unreadable_compact


def unreadable_digest(*args: Any) -> Any:
    return expand_digest(unreadable_compact(*args))


_TORN = {"reason": "rollout record is unreadable", "error": "JSONDecodeError"}


def test_equals_the_per_record_step_on_a_torn_line() -> None:
    for ignored in (frozenset(), frozenset({RECORD_UNREADABLE}), frozenset({"model_call_failed"})):
        stepped = digest_line(
            b"{torn", source_path="r.jsonl", source_index=2, line_number=7, ordinal=11, ignored_checks=ignored
        )
        built = unreadable_digest(_TORN, "r.jsonl", 2, 7, 11, ignored)
        assert built == stepped


def test_identity_locator_and_verdicts() -> None:
    digest = unreadable_digest(_TORN, "r.jsonl", 2, 7, 11, frozenset())
    assert (digest.task_index, digest.rollout_index, digest.rollout_id) == (
        "__unreadable_record__:input-2:line-7",
        0,
        "__unreadable_record__:input-2:line-7-0",
    )
    assert digest.verdict == "unhealthy"
    [finding] = digest.findings
    assert finding.locator == {"source_file": "r.jsonl", "line": 7}
    assert finding.detail == _TORN
    assert digest.unobserved == [check for check in ROLLOUT_CHECK_IDS if check != RECORD_UNREADABLE]
    ignored = unreadable_digest(_TORN, "r.jsonl", 2, 7, 11, frozenset({RECORD_UNREADABLE}))
    assert (ignored.verdict, ignored.findings) == ("unobserved", [])
    everything = frozenset(ROLLOUT_CHECK_IDS)
    assert unreadable_digest(_TORN, "r.jsonl", 2, 7, 11, everything).verdict == "healthy"
