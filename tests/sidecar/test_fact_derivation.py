"""A fact carries the row's agent: on the raw path (row bytes, the fast path's one decode) and on
the full path alike, for every disposition and for failed attempts; capped client text."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sidecar.ingest.engines import default_engines
from sidecar.ingest.events import EventBatch
from sidecar.ingest.facts import derive_fact
from sidecar.ingest.raw_rows import RawRow, decode_request
from sidecar.journal import CompletedFact, Disposition, FailedFact, decode_fact, encode_fact
from sidecar.state.agents import AGENT_NAME_CHARS

from .service_support import generate_run

SETTINGS = ("rollouts.jsonl", frozenset[str]())


@pytest.fixture(scope="module")
def everyday_row() -> dict[str, Any]:
    run = generate_run(num_tasks=2, repeats=1, fault_rate=0.0, failure_rate=0.0, drained_fraction=0.0)
    row: dict[str, Any] = next(event["row"] for event in run.events if event["kind"] == "completed")
    return row


def _both_paths(event: dict[str, Any]) -> list[Any]:
    """The event as the raw path decodes it (row bytes) and as the full path does (a dict)."""
    body = orjson.dumps([event])
    decoded = decode_request(body, 1024)
    assert decoded is not None
    (raw,) = EventBatch.validate_python(decoded)
    (full,) = EventBatch.validate_python(orjson.loads(body))
    return [raw, full]


def _facts(event: dict[str, Any]) -> list[Any]:
    facts = [
        derive_fact(each, received_at=1.0, engines=default_engines(), settings=SETTINGS)
        for each in _both_paths(event)
    ]
    assert facts[0] == facts[1]
    return facts


class TestAgentInFacts:
    def test_an_everyday_row_on_the_fast_path(self, everyday_row: dict[str, Any]) -> None:
        row = {**everyday_row, "agent_ref": {"name": "math_agent"}}
        raw, full = _both_paths({"kind": "completed", "seconds": 2.0, "row": row})
        assert isinstance(raw.row, RawRow)
        facts = [
            derive_fact(e, received_at=1.0, engines=default_engines(), settings=SETTINGS) for e in (raw, full)
        ]
        assert facts[0] == facts[1]
        assert isinstance(facts[0], CompletedFact) and facts[0].digest is not None  # vouched for
        assert facts[0].agent == "math_agent"

    @pytest.mark.parametrize(
        ("extra", "disposition"),
        [
            ({}, Disposition.DIGESTED),
            ({"_ng_no_persist": True}, Disposition.NOT_PERSISTED),
            ({"_ng_failure_class": "agent_run_error"}, Disposition.FAILURE_ROW),
        ],
    )
    def test_every_disposition_keeps_the_agent(self, extra: dict[str, Any], disposition: Disposition) -> None:
        row = {
            "_ng_task_index": 1,
            "_ng_rollout_index": 0,
            "agent_ref": {"name": "coder"},
            "reward": 1,
            **extra,
        }
        (fact, _) = _facts({"kind": "completed", "seconds": 1.0, "row": row})
        assert fact.disposition == disposition and fact.agent == "coder"

    def test_a_failed_attempt_keeps_the_agent(self) -> None:
        row = {"_ng_task_index": 1, "_ng_rollout_index": 0, "agent_ref": {"name": "coder"}}
        (fact, _) = _facts({"kind": "failed", "seconds": 4.0, "row": row, "failure_class": "cancelled"})
        assert isinstance(fact, FailedFact) and fact.agent == "coder"

    @pytest.mark.parametrize("ref", [None, "coder", {"name": 7}, {"name": ["x"]}, {"id": "coder"}])
    def test_no_agent_named_is_none(self, ref: Any) -> None:
        row = {"_ng_task_index": 1, "_ng_rollout_index": 0, "agent_ref": ref, "reward": 1}
        (fact, _) = _facts({"kind": "completed", "seconds": 1.0, "row": row})
        assert fact.agent is None

    def test_a_long_hostile_name_is_capped_and_journaled_exactly(self) -> None:
        name = '<img src=x onerror="alert(1)">' * 40
        row = {"_ng_task_index": 1, "_ng_rollout_index": 0, "agent_ref": {"name": name}, "reward": 1}
        (fact, _) = _facts({"kind": "completed", "seconds": 1.0, "row": row})
        assert fact.agent == name[:AGENT_NAME_CHARS]
        assert decode_fact(encode_fact(fact)).agent == fact.agent
