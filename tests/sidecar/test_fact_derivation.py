"""A fact carries the row's agent and its time, for every disposition and for failed attempts;
capped client text."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from sidecar.http.ingest_handlers import parse_events
from sidecar.ingest.engines import default_engines
from sidecar.ingest.facts import derive_fact
from sidecar.journal import CompletedFact, Disposition, FailedFact, decode_fact, encode_fact
from sidecar.state.agents import AGENT_NAME_CHARS

from .service_support import generate_run

SETTINGS = ("rollouts.jsonl", frozenset[str]())


@pytest.fixture(scope="module")
def everyday_row() -> dict[str, Any]:
    run = generate_run(num_tasks=2, repeats=1, fault_rate=0.0, failure_rate=0.0, drained_fraction=0.0)
    row: dict[str, Any] = next(event["row"] for event in run.events if event["kind"] == "completed")
    return row


def _decoded(event: dict[str, Any]) -> list[Any]:
    """The event as the service decodes it from a request body."""
    return parse_events(orjson.dumps([event]))


def _facts(event: dict[str, Any]) -> list[Any]:
    return [
        derive_fact(each, received_at=1.0, engines=default_engines(), settings=SETTINGS)
        for each in _decoded(event)
    ]


class TestAgentInFacts:
    def test_an_everyday_row(self, everyday_row: dict[str, Any]) -> None:
        row = {**everyday_row, "agent_ref": {"name": "math_agent"}}
        facts = _facts({"kind": "completed", "seconds": 2.0, "row": row})
        assert isinstance(facts[0], CompletedFact) and facts[0].digest is not None
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
        (fact,) = _facts({"kind": "completed", "seconds": 1.0, "row": row})
        assert fact.disposition == disposition and fact.agent == "coder"

    def test_a_failed_attempt_keeps_the_agent(self) -> None:
        row = {"_ng_task_index": 1, "_ng_rollout_index": 0, "agent_ref": {"name": "coder"}}
        (fact,) = _facts({"kind": "failed", "seconds": 4.0, "row": row, "failure_class": "cancelled"})
        assert isinstance(fact, FailedFact) and fact.agent == "coder"

    @pytest.mark.parametrize("ref", [None, "coder", {"name": 7}, {"name": ["x"]}, {"id": "coder"}])
    def test_no_agent_named_is_none(self, ref: Any) -> None:
        row = {"_ng_task_index": 1, "_ng_rollout_index": 0, "agent_ref": ref, "reward": 1}
        (fact,) = _facts({"kind": "completed", "seconds": 1.0, "row": row})
        assert fact.agent is None

    def test_a_long_hostile_name_is_capped_and_journaled_exactly(self) -> None:
        name = '<img src=x onerror="alert(1)">' * 40
        row = {"_ng_task_index": 1, "_ng_rollout_index": 0, "agent_ref": {"name": name}, "reward": 1}
        (fact,) = _facts({"kind": "completed", "seconds": 1.0, "row": row})
        assert fact.agent == name[:AGENT_NAME_CHARS]
        assert decode_fact(encode_fact(fact)).agent == fact.agent


def _retimed(row: dict[str, Any], turn_time: Any, call_time: Any = None) -> dict[str, Any]:
    """``row`` with its trajectory's turn timestamps set to ``turn_time``, calls' ``completed_at``
    to ``call_time``."""
    trajectory = row["ng_trajectory"]
    turns = [{**turn, "timestamp": turn_time} for turn in trajectory["turns"]]
    calls = [{**call, "completed_at": call_time} for call in trajectory.get("model_calls", [])]
    return {**row, "ng_trajectory": {**trajectory, "turns": turns, "model_calls": calls}}


class TestTimeInFacts:
    """A fact's ``at``: the row's own evidence where it reads as a wall-clock time, else the
    sender's stamp, else none; on both paths, and kept by the journal's encoding."""

    ARRIVAL = 1_800_000_000.0

    def _at(self, event: dict[str, Any]) -> Any:
        facts = [
            derive_fact(each, received_at=self.ARRIVAL, engines=default_engines(), settings=SETTINGS)
            for each in _decoded(event)
        ]
        assert decode_fact(encode_fact(facts[0])).at == facts[0].at
        return facts[0].at

    @pytest.mark.parametrize(
        ("turn", "call", "expected"),
        [
            (1_799_990_000.0, 1_799_990_030.5, 1_799_990_030.5),  # the latest of turns and calls
            (1_799_990_000.0, None, 1_799_990_000.0),
            (101.0, 250.0, "stamp"),  # NeMo Gym's own test rows: seconds of a relative clock
            (1_799_990_000_000.0, None, "stamp"),  # milliseconds are not seconds
            (1_800_000_000.0 + 2 * 86_400, None, "stamp"),  # two days in the future
        ],
    )
    def test_the_rows_own_evidence_else_the_senders_stamp(
        self, everyday_row: dict[str, Any], turn: float, call: float | None, expected: Any
    ) -> None:
        row = _retimed(everyday_row, turn, call)
        stamp = 1_799_999_000.0
        assert self._at({"kind": "completed", "seconds": 2.0, "row": row, "at": stamp}) == (
            stamp if expected == "stamp" else expected
        )
        assert self._at({"kind": "completed", "seconds": 2.0, "row": row}) == (
            None if expected == "stamp" else expected
        )

    def test_a_follower_line_without_a_trajectory_has_no_time(self) -> None:
        line = (
            '{"_ng_task_index": 3, "_ng_rollout_index": 0, "reward": 1.0, "ng_perf": {"total_latency_ms": 5}}'
        )
        assert self._at({"kind": "completed", "line": line, "line_number": 1, "seconds": 5.0}) is None

    def test_failed_drained_started_and_latency_events_carry_the_stamp(self) -> None:
        row = {"_ng_task_index": 1, "_ng_rollout_index": 0}
        for event in (
            {"kind": "failed", "row": row, "seconds": 1.0},
            {"kind": "drained", "task_index": 1},
            {"kind": "started", "task_index": 1},
            {"kind": "latency", "op": "record", "seconds": 1.0, "source": "s", "seq": 0},
        ):
            assert self._at({**event, "at": 1_799_999_500.0}) == 1_799_999_500.0
            assert self._at(event) is None
