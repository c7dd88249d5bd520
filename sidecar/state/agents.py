"""Per-agent totals of a run (rows naming ``agent_ref.name``): counts, ``ng_perf`` sums and a
fixed-bucket histogram, for at most :data:`MAX_AGENTS`; no server import (``health-check --html``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

from sidecar.state.durations import DurationHistogram

__all__ = [
    "AGENT_NAME_CHARS",
    "MAX_AGENTS",
    "OTHER_AGENTS",
    "AgentBody",
    "AgentTotals",
    "agent_name",
]

#: Characters of an agent's name kept (a longer name is cut there: client text has a cap).
AGENT_NAME_CHARS: Final = 200
#: Distinct agents a run counts by name; rows of any further agent are counted together under
#: :data:`OTHER_AGENTS` (and :attr:`AgentTotals.folded` counts those rows).
MAX_AGENTS: Final = 100
#: The name the page shows for the agents past :data:`MAX_AGENTS` (its row has ``other`` true).
OTHER_AGENTS: Final = "(other agents)"
#: ``ng_perf`` fields summed per agent (integers only; a bool or a float is not a count).
PERF_SUMS: Final = ("num_turns", "num_tool_calls", "prompt_tokens", "completion_tokens")


@with_config(ConfigDict(extra="forbid"))
class AgentBody(TypedDict):
    """One agent on the run page (``docs/report.md``, ``agents``).
    A batch page's ``failed`` and ``rollouts_per_hour`` are ``None`` (the files hold neither)."""

    agent: str
    other: bool
    rollouts: int
    failed: int | None
    rollouts_per_hour: float | None
    latency_samples: int
    latency_p50_s: float | None
    latency_p95_s: float | None
    num_turns: int
    num_tool_calls: int
    prompt_tokens: int
    completion_tokens: int


def agent_name(row: Mapping[str, Any] | Any) -> str | None:
    """The row's ``agent_ref.name`` (a string), cut to :data:`AGENT_NAME_CHARS`, lone surrogates
    replaced (the page's JSON is UTF-8); ``None`` when the row names no agent."""
    get = getattr(row, "get", None)
    ref = None if get is None else get("agent_ref")
    name = ref.get("name") if isinstance(ref, dict) else None
    if type(name) is not str:
        return None
    name = name[:AGENT_NAME_CHARS]
    if not name.isascii():
        name = name.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
    return name


class _Agent:
    """One agent's counts: rollouts, failures, their latency in fixed buckets, ``ng_perf`` sums."""

    __slots__ = ("failed", "latency", "perf", "rollouts")

    def __init__(self) -> None:
        self.rollouts = 0
        self.failed = 0
        self.latency = DurationHistogram()
        self.perf = [0] * len(PERF_SUMS)

    def to_snapshot(self) -> list[Any]:
        return [self.rollouts, self.failed, self.latency.to_snapshot(), self.perf]

    @classmethod
    def from_snapshot(cls, data: list[Any]) -> _Agent:
        agent = cls()
        rollouts, failed, latency, perf = data
        agent.rollouts, agent.failed = int(rollouts), int(failed)
        agent.latency = DurationHistogram.from_snapshot(latency)
        if len(perf) != len(PERF_SUMS):
            raise ValueError(f"agent snapshot: {len(perf)} perf sums, expected {len(PERF_SUMS)}")
        agent.perf = list(perf)
        return agent


class AgentTotals:
    """Per-agent totals of one run, in first-seen order, bounded by :data:`MAX_AGENTS`; applied
    only from facts."""

    __slots__ = ("_agents", "_other", "folded")

    def __init__(self) -> None:
        self._agents: dict[str, _Agent] = {}
        self._other: _Agent | None = None
        #: Rows (rollouts and failures) counted under :data:`OTHER_AGENTS`.
        self.folded = 0

    def to_snapshot(self) -> dict[str, Any]:
        return {
            "agents": {name: agent.to_snapshot() for name, agent in self._agents.items()},
            "other": None if self._other is None else self._other.to_snapshot(),
            "folded": self.folded,
        }

    @classmethod
    def from_snapshot(cls, data: dict[str, Any]) -> AgentTotals:
        totals = cls()
        totals._agents = {str(name): _Agent.from_snapshot(agent) for name, agent in data["agents"].items()}
        totals._other = None if data["other"] is None else _Agent.from_snapshot(data["other"])
        totals.folded = int(data["folded"])
        return totals

    def __len__(self) -> int:
        return len(self._agents) + (self._other is not None)

    def _of(self, name: str) -> _Agent:
        agent = self._agents.get(name)
        if agent is not None:
            return agent
        if len(self._agents) < MAX_AGENTS:
            agent = self._agents[name] = _Agent()
            return agent
        self.folded += 1
        if self._other is None:
            self._other = _Agent()
        return self._other

    def rollout(self, name: str, seconds: float | None, perf: Mapping[str, Any] | None) -> None:
        """One rollout of ``name`` for the main file: its latency (if timed) and ``ng_perf``."""
        agent = self._of(name)
        agent.rollouts += 1
        if seconds is not None:
            agent.latency.observe(seconds)
        if perf is not None:
            sums, get = agent.perf, perf.get
            for position, key in enumerate(PERF_SUMS):
                value = get(key)
                if type(value) is int:  # JSON and MessagePack integers; never a bool
                    sums[position] += value

    def failure(self, name: str) -> None:
        """One failed attempt of ``name``."""
        self._of(name).failed += 1

    def rows(self, elapsed_s: float | None, *, failures: bool = True) -> list[AgentBody] | None:
        """The page's rows, by name (the others last); ``None`` when no row named an agent."""
        if not self._agents:
            return None
        named = [(name, self._agents[name], False) for name in sorted(self._agents)]
        if self._other is not None:
            named.append((OTHER_AGENTS, self._other, True))
        per_hour = 3600.0 / elapsed_s if elapsed_s is not None and elapsed_s > 0 else None
        return [
            {
                "agent": name,
                "other": other,
                "rollouts": agent.rollouts,
                "failed": agent.failed if failures else None,
                "rollouts_per_hour": None if per_hour is None else agent.rollouts * per_hour,
                "latency_samples": agent.latency.observations,
                "latency_p50_s": agent.latency.quantile(0.5),
                "latency_p95_s": agent.latency.quantile(0.95),
                "num_turns": agent.perf[0],
                "num_tool_calls": agent.perf[1],
                "prompt_tokens": agent.perf[2],
                "completion_tokens": agent.perf[3],
            }
            for name, agent, other in named
        ]
