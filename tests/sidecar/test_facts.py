"""The journal's facts: the state schema stamp moves with what a journaled digest means."""

from __future__ import annotations

import msgspec
import pytest

from health import compact, registry
from sidecar.journal import _facts
from sidecar.journal._facts import STATE_SCHEMA


class TestStateSchema:
    def test_it_names_the_facts_format_and_the_registrys_fingerprint(self) -> None:
        assert f"facts-{_facts.FACTS_FORMAT}/health-{_facts._health_fingerprint()}" == STATE_SCHEMA

    @pytest.mark.parametrize(
        ("module", "name", "changed"),
        [
            (_facts, "CHECK_IDS", tuple(reversed(registry.CHECK_IDS))),
            (_facts, "ROLLOUT_CHECK_IDS", (*registry.ROLLOUT_CHECK_IDS, "rollout_new_check")),
            (_facts, "TASK_CHECK_IDS", registry.TASK_CHECK_IDS[1:]),
            (_facts, "VERDICTS", ("healthy", "unobserved", "unhealthy")),
            (_facts, "ENDED_ON_ERROR", 8),
            (_facts, "CompactDigest", compact.PlainFinding),
        ],
    )
    def test_any_change_of_registry_or_layout_changes_the_fingerprint(
        self, monkeypatch: pytest.MonkeyPatch, module: object, name: str, changed: object
    ) -> None:
        before = _facts._health_fingerprint()
        monkeypatch.setattr(module, name, changed)
        assert _facts._health_fingerprint() != before


class TestNamedCodes:
    def test_dispositions_are_named_and_stored_as_their_ints(self) -> None:
        assert [int(code) for code in _facts.Disposition] == [0, 1, 2, 3]

    def test_verdict_codes_index_their_names(self) -> None:
        assert tuple(code.name.lower() for code in compact.VerdictCode) == compact.VERDICTS
        assert type(compact.UNOBSERVED) is int and compact.VERDICTS[compact.UNOBSERVED] == "unobserved"


class TestFactsFormats:
    """Every fact decodes to what was encoded: agent and time included."""

    def _completed(self, agent: str | None) -> _facts.CompletedFact:
        return _facts.CompletedFact(
            5.0,
            0,
            2.5,
            1,
            0,
            int(_facts.Disposition.DIGESTED),
            "",
            False,
            {"num_turns": 1},
            None,
            None,
            b"{}",
            False,
            3,
            None,
            agent,
        )

    def test_the_agent_round_trips(self) -> None:
        completed = self._completed("math_agent")
        failed = _facts.FailedFact(5.0, 0, 1.0, 1, 0, "cancelled", False, 0, None, "coder")
        for fact in (completed, failed):
            assert _facts.decode_fact(_facts.encode_fact(fact)) == fact

    def test_the_time_round_trips(self) -> None:
        facts = (
            msgspec.structs.replace(self._completed("a"), at=1_790_000_000.25),
            _facts.StartedFact(5.0, 0, 1, 0, 0, 1_790_000_000.0),
            _facts.LatencyFact(5.0, 0, "record", 2.0, 1_790_000_001.0),
            _facts.RunEndedFact(5.0, 0, 9.0, 9.0),
        )
        for fact in facts:
            assert _facts.decode_fact(_facts.encode_fact(fact)) == fact

    @pytest.mark.parametrize(
        "items", [[99, 1.0, 0, "record", 2.0], [6, "x", 0, "record", 2.0], [6, 1.0], "6"]
    )
    def test_a_record_that_is_not_a_fact_is_refused_naming_its_seq(self, items: object) -> None:
        with pytest.raises(_facts.FactError, match=r"record 9: not a fact of this build"):
            _facts.decode_fact(msgspec.msgpack.encode(items), seq=9)
