"""Per-agent totals: bounded per agent and in agents, the same figures after a pickle round trip."""

from __future__ import annotations

import pickle

import pytest

from sidecar.state.agents import AGENT_NAME_CHARS, MAX_AGENTS, OTHER_AGENTS, AgentTotals, agent_name


class TestAgentName:
    def test_reads_agent_ref_name(self) -> None:
        assert agent_name({"agent_ref": {"name": "math_agent"}}) == "math_agent"

    @pytest.mark.parametrize(
        "row",
        [{}, {"agent_ref": None}, {"agent_ref": "math_agent"}, {"agent_ref": {"name": 3}},
         {"agent_ref": {"name": None}}, {"agent_ref": {}}, None],
    )  # fmt: skip
    def test_a_row_naming_no_agent_has_none(self, row: object) -> None:
        assert agent_name(row) is None

    def test_a_long_name_is_cut_at_the_cap(self) -> None:
        name = agent_name({"agent_ref": {"name": "a" * (AGENT_NAME_CHARS + 50)}})
        assert name == "a" * AGENT_NAME_CHARS

    def test_lone_surrogates_are_replaced_so_the_page_json_stays_utf8(self) -> None:
        name = agent_name({"agent_ref": {"name": "agent-\ud800-x"}})
        assert name is not None
        name.encode("utf-8")  # does not raise
        assert name.startswith("agent-") and name.endswith("-x")


class TestAgentTotals:
    def test_no_agent_no_rows(self) -> None:
        assert AgentTotals().rows(10.0) is None

    def test_counts_rates_latency_and_ng_perf_per_agent(self) -> None:
        totals = AgentTotals()
        for seconds in (10.0, 20.0, 30.0, 40.0):
            perf = {"num_turns": 2, "num_tool_calls": 1, "prompt_tokens": 100, "completion_tokens": 7}
            totals.rollout("fast", seconds, perf)
        totals.rollout("slow", 1000.0, {"num_turns": True, "prompt_tokens": 1.5})  # not counts
        totals.rollout("slow", None, None)
        totals.failure("slow")
        rows = totals.rows(3600.0)
        assert rows is not None
        fast, slow = rows
        assert fast["agent"] == "fast" and slow["agent"] == "slow"
        assert (fast["rollouts"], fast["failed"], fast["rollouts_per_hour"]) == (4, 0, 4.0)
        assert (slow["rollouts"], slow["failed"], slow["rollouts_per_hour"]) == (2, 1, 2.0)
        assert fast["latency_samples"] == 4 and slow["latency_samples"] == 1
        assert (fast["num_turns"], fast["num_tool_calls"], fast["prompt_tokens"]) == (8, 4, 400)
        assert fast["completion_tokens"] == 28
        assert (slow["num_turns"], slow["prompt_tokens"]) == (0, 0)
        assert slow["latency_p50_s"] == slow["latency_p95_s"] == 1000.0
        assert fast["latency_p50_s"] is not None and fast["latency_p95_s"] is not None
        assert 10.0 <= fast["latency_p50_s"] <= fast["latency_p95_s"] <= 40.0

    def test_no_elapsed_time_no_rate_and_a_batch_source_no_failures(self) -> None:
        totals = AgentTotals()
        totals.rollout("a", 1.0, None)
        for elapsed in (None, 0.0, -1.0):
            rows = totals.rows(elapsed, failures=False)
            assert rows is not None
            assert rows[0]["rollouts_per_hour"] is None and rows[0]["failed"] is None

    def test_agents_past_the_cap_are_folded_into_one_row(self) -> None:
        totals = AgentTotals()
        for index in range(MAX_AGENTS + 30):
            totals.rollout(f"agent-{index:04d}", 1.0, None)
        totals.failure("agent-late")
        totals.rollout("agent-0000", 2.0, None)  # a named agent keeps counting under its name
        rows = totals.rows(60.0)
        assert rows is not None and len(rows) == MAX_AGENTS + 1 == len(totals)
        assert [row["other"] for row in rows] == [False] * MAX_AGENTS + [True]
        assert rows[-1]["agent"] == OTHER_AGENTS
        assert (rows[-1]["rollouts"], rows[-1]["failed"]) == (30, 1)
        assert totals.folded == 31
        assert rows[0]["agent"] == "agent-0000" and rows[0]["rollouts"] == 2

    def test_memory_is_fixed_per_agent_not_per_rollout(self) -> None:
        def size(rollouts: int) -> int:
            totals = AgentTotals()
            for index in range(rollouts):
                # every bucket observed and every count multi-digit either way: same pickle size
                totals.rollout(f"agent-{index % 3}", float(1 + index % 30000), {"num_turns": 1})
                totals.failure(f"agent-{index % 3}")
            return len(pickle.dumps(totals))

        assert size(100_000) - size(30_000) <= 3 * 8  # at most a few wider integers per agent

    def test_a_pickle_round_trip_keeps_every_figure(self) -> None:
        totals = AgentTotals()
        for index in range(500):
            totals.rollout(f"agent-{index % 7}", 0.5 + index, {"num_tool_calls": index % 3})
            if index % 11 == 0:
                totals.failure(f"agent-{index % 5}")
        again = pickle.loads(pickle.dumps(totals))
        assert again.rows(1234.5) == totals.rows(1234.5)
        assert again.folded == totals.folded
