"""The plain walk against the full walk on every fast-path record of the synthetic corpus."""

from __future__ import annotations

from health.evidence import build_evidence, usage_tokens
from health.fast_path import read_everyday_record
from health.walk import PLAIN_WALK_APPLIES, walk, walk_plain

from .fast_path_support import synthetic_corpus


def test_plain_walk_matches_the_full_walk_with_and_without_unusual_calls() -> None:
    assert PLAIN_WALK_APPLIES
    walked = with_unusual = with_findings = 0
    for item in synthetic_corpus():
        everyday = read_everyday_record(item.line)
        if everyday is None or everyday.record.ng_trajectory is None:
            continue
        response = everyday.record.response
        usage = (None, None) if response is None else usage_tokens(response.usage)
        evidence = build_evidence(everyday.record.ng_trajectory, {}, everyday.responses, usage=usage)
        if not evidence.trajectory_observed or evidence.gaps:
            continue
        plain = walk_plain(evidence)
        assert plain == walk(evidence, None, frozenset()), item.line[:300]
        walked += 1
        with_unusual += bool(evidence.unusual_calls)
        with_findings += bool(evidence.unusual_calls and plain.findings)
    assert walked > 50
    assert with_unusual > 10
    assert with_findings > 10
