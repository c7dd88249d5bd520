"""Lay out one rollout: a multi-turn agent run with tool calls and subagents, in time order.

Steps are walked chronologically, so ``model_calls`` is in completion order and every call is
referenced by the turn and the invocation that made it. Faults that change the shape of the run
(an extra failed, runaway or empty attempt before a step, a hollow turn, a failed last call) are
laid out here; faults that only edit fields are applied afterwards (``_faults``).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from . import _items as items
from ._calls import CallFactory, Timing, judge_call, output_chars
from ._config import SyntheticConfig
from ._text import hex_id, text, words

__all__ = ["PRE_ATTEMPT_FAULTS", "BuiltRollout", "build_rollout", "task_question"]

JSON = dict[str, Any]

PRE_ATTEMPT_FAULTS: Final = {
    "failed_model_call": "failed",
    "runaway_generation": "runaway",
    "zero_completion_tokens": "empty",
}
"""Faults laid out as an extra, discarded attempt just before a normal step (then retried)."""
_TOOL_ERROR_RATE: Final = 0.05


@dataclass(slots=True)
class BuiltRollout:
    """A rollout under construction: the trajectory parts, before usage and capture are derived."""

    task_id: str
    rollout_id: str
    dialect: str
    invocations: list[JSON] = field(default_factory=list)
    turns: list[JSON] = field(default_factory=list)
    model_calls: list[JSON] = field(default_factory=list)
    tool_calls: list[JSON] = field(default_factory=list)
    gaps: list[JSON] = field(default_factory=list)
    final_output: list[JSON] = field(default_factory=list)
    """Responses-API output items of the main agent's last step (the row's top-level ``response``)."""
    auxiliary_calls: list[JSON] = field(default_factory=list)
    """Captured calls no invocation references (a judge); appended to ``model_calls`` last."""


@dataclass(slots=True)
class _Plan:
    """What one invocation does: per turn, the user's message and the kinds of its steps."""

    turns: list[tuple[str, list[str]]]
    outcomes: dict[tuple[int, int], str] = field(default_factory=dict)
    """Non-``ok`` outcomes by ``(turn_no, step_no)``: ``pre``, ``hollow`` or ``failed``."""
    subagent_steps: int = 0


@dataclass(slots=True)
class _Invocation:
    """Running state of one invocation: its record, conversation and prompt size so far."""

    invocation_id: str
    plan: _Plan
    record: JSON
    conversation: list[JSON]
    context: int = 0
    answer_text: str = ""


def task_question(seed: int, task_index: int, scale: float = 1.0) -> str:
    """The task prompt, shared by every repeat of ``task_index`` (``scale`` shrinks it)."""
    rng = random.Random(f"task:{seed}:{task_index}")
    return f"Task {task_index}: {words(rng, 6)}. " + text(rng, _scaled(rng, 200, 900, scale))


def _scaled(rng: random.Random, low: int, high: int, scale: float) -> int:
    """A length in ``[low, high]`` scaled down by ``scale`` (never below a few characters)."""
    low, high = max(8, int(low * scale)), max(16, int(high * scale))
    return low + int(rng.random() * (high - low + 1))


def _split(rng: random.Random, timing: Timing, count: int) -> list[Timing]:
    """``count`` back-to-back intervals covering ``timing`` with random widths."""
    weights = [rng.uniform(0.4, 1.6) for _ in range(count)]
    scale = (timing.end - timing.start) / sum(weights)
    out: list[Timing] = []
    cursor = timing.start
    for weight in weights:
        nxt = cursor + weight * scale
        out.append(Timing(cursor, nxt))
        cursor = nxt
    return out


def _ms(timing: Timing) -> float:
    return round((timing.end - timing.start) * 1000.0, 3)


class _Walker:
    """Walks the agent's steps in time order, appending calls, turns and tool calls to ``out``."""

    def __init__(self, rng: random.Random, config: SyntheticConfig, out: BuiltRollout, fault: str | None):
        self.rng = rng
        self.out = out
        self.scale = config.text_scale
        self.pre_attempt = PRE_ATTEMPT_FAULTS.get(fault or "")
        self.calls = CallFactory(rng, out.dialect, config.payload_bytes_per_call, config.policy_model)
        self.sandbox_id = f"sandbox-{hex_id(rng, 48)}"

    def _call(
        self,
        kind: str,
        outcome: str,
        conversation: list[JSON],
        timing: Timing,
        context: int,
        tool_call: JSON | None,
        refs: list[JSON],
    ) -> list[JSON]:
        call, output = self.calls.make(kind, outcome, conversation, timing, context, tool_call)
        self.out.model_calls.append(call)
        refs.append(self.calls.ref(call))
        return output

    def _tool_call(self, kind: str) -> JSON:
        rng = self.rng
        if kind == "spawn":
            name, arguments = "task", {"description": text(rng, _scaled(rng, 60, 300, self.scale))}
        else:
            name = rng.choice(items.TOOL_NAMES)
            arguments = {"command" if name == "run_shell" else "path": words(rng, 3 + int(rng.random() * 7))}
        return items.function_call_item(
            rng, f"call_{hex_id(rng, 96)}", name, orjson.dumps(arguments).decode()
        )

    def invocation(
        self, invocation_id: str, plan: _Plan, timing: Timing, parent: str | None, spawned_by: str | None
    ) -> str:
        """Run one agent invocation; returns the text of its last answer."""
        record: JSON = {
            "kind": "agent_invocation",
            "invocation_id": invocation_id,
            "parent_invocation_id": parent,
            "spawned_by_tool_call_id": spawned_by,
            "status": "completed",
            "duration_ms": _ms(timing),
            "error_type": None,
            "model_calls": [],
            "conversation": [],
        }
        self.out.invocations.append(record)
        state = _Invocation(invocation_id, plan, record, record["conversation"])
        slots = iter(_split(self.rng, timing, sum(len(kinds) for _, kinds in plan.turns)))
        for turn_no, (question, kinds) in enumerate(plan.turns, start=1):
            refs, answer, end = self._turn(state, turn_no, question, kinds, slots)
            if parent is None and answer:
                self.out.final_output = (
                    answer if isinstance(answer, list) else [items.assistant_message_item(self.rng, answer)]
                )
            self.out.turns.append(
                {
                    "invocation_id": invocation_id,
                    "task_id": self.out.task_id,
                    "rollout_id": self.out.rollout_id,
                    "turn_no": turn_no,
                    "timestamp": round(end, 6),
                    "question": question,
                    "answer": answer,
                    "reasoning_content": None,
                    "resolved": None,
                    "step_count": len(refs),
                    "model_calls": refs,
                }
            )
            record["model_calls"].extend(refs)
        return state.answer_text or text(self.rng, 200)

    def _turn(
        self, state: _Invocation, turn_no: int, question: str, kinds: list[str], slots: Iterator[Timing]
    ) -> tuple[list[JSON], Any, float]:
        """One user turn: its steps in order; returns its call refs, its answer and its end time."""
        state.conversation.append(items.user_message_item(question))
        state.context += len(question)
        refs: list[JSON] = []
        answer: Any = None
        end = 0.0
        for step_no, kind in enumerate(kinds):
            slot = next(slots)
            end = slot.end
            output = self._step(state, kind, state.plan.outcomes.get((turn_no, step_no), "ok"), slot, refs)
            if output is None:
                break
            message = "".join(i["content"][0]["text"] for i in output if i["type"] == "message")
            answer = (message or output) if self.calls.chat else output
        return refs, answer, end

    def _step(
        self, state: _Invocation, kind: str, outcome: str, slot: Timing, refs: list[JSON]
    ) -> list[JSON] | None:
        """One agent step (a model call, then its tool call); ``None`` if the call failed for good."""
        tools_at = slot.end if kind in ("think", "final") else slot.start + (slot.end - slot.start) * 0.6
        start = slot.start
        if outcome == "pre" and self.pre_attempt is not None:
            cut = start + (tools_at - start) * 0.3
            self._call(
                kind, self.pre_attempt, state.conversation, Timing(start, cut), state.context, None, refs
            )
            start, outcome = cut, "ok"
        tool_call = self._tool_call(kind) if kind in ("tool", "spawn") else None
        output = self._call(
            kind, outcome, state.conversation, Timing(start, tools_at), state.context, tool_call, refs
        )
        if outcome in ("failed", "rejected"):
            state.record["status"], state.record["error_type"] = "failed", "ModelCallError"
            return None
        state.conversation.extend(output)
        state.context += 120 * len(output) + output_chars(output)
        if kind == "final":
            state.answer_text = "".join(i["content"][0]["text"] for i in output if i["type"] == "message")
        if tool_call is not None:
            result = self.tool(kind, tool_call, state.invocation_id, Timing(tools_at, slot.end), state.plan)
            state.conversation.append(items.function_call_output_item(tool_call["call_id"], result))
            state.context += len(result)
        return output

    def tool(self, kind: str, tool_call: JSON, invocation_id: str, timing: Timing, plan: _Plan) -> str:
        """Execute a tool call, or run the subagent it spawns, inside ``timing``; returns its output."""
        call_id = tool_call["call_id"]
        if kind == "spawn":
            sub_id = f"{invocation_id}.sub{len(self.out.invocations)}"
            description = orjson.loads(tool_call["arguments"])["description"]
            sub_plan = _Plan([(description, ["tool"] * (plan.subagent_steps - 1) + ["final"])])
            inner = Timing(timing.start + 0.01 * (timing.end - timing.start), timing.end)
            saved, self.calls.prev_prompt = self.calls.prev_prompt, 0
            result = self.invocation(sub_id, sub_plan, inner, invocation_id, call_id)[:2000]
            self.calls.prev_prompt = saved
            status, error_type = "completed", None
        else:
            result = text(self.rng, _scaled(self.rng, 100, 700, self.scale))
            status, error_type = "completed", None
            if self.rng.random() < _TOOL_ERROR_RATE:
                status, error_type = "failed", "CommandError"
                result = f"Error: command exited with status 1\n{result[:200]}"
        self.out.tool_calls.append(
            {
                "kind": "tool_call",
                "invocation_id": invocation_id,
                "tool_call_id": call_id,
                "sandbox_id": None if kind == "spawn" else self.sandbox_id,
                "tool_name": tool_call["name"],
                "started_at": round(timing.start, 6),
                "completed_at": round(timing.end, 6),
                "duration_ms": _ms(timing),
                "timing_source": "harness",
                "status": status,
                "error_type": error_type,
                "output": result,
            }
        )
        return result


def _step_counts(rng: random.Random, config: SyntheticConfig, fault: str | None) -> tuple[list[int], int]:
    """Steps per main-agent turn and the subagent's step count (0: no subagent)."""
    mean = config.model_calls_per_rollout
    calls = max(1, round(rng.triangular(1, 2 * mean - 1, mean))) if mean > 1 else 1
    if fault in PRE_ATTEMPT_FAULTS:
        calls = max(1, calls - 1)  # the extra attempt keeps the call count on target
    sub = 0
    if calls >= 4 and rng.random() < config.subagent_probability:
        sub = rng.randint(1, max(1, calls // 3))
    main = calls - sub
    turns = min(config.turns, main)
    counts = [1] * turns
    for _ in range(main - turns):
        counts[rng.randrange(turns)] += 1
    if fault == "ended_on_failed_call" and counts[-1] < 2:
        counts[-1] += 1
    return counts, sub


def _main_plan(rng: random.Random, config: SyntheticConfig, question: str, fault: str | None) -> _Plan:
    if fault == "broken_task":  # the first call is rejected and the agent gives up
        return _Plan([(question, ["final"])], {(1, 0): "rejected"})
    counts, sub = _step_counts(rng, config, fault)
    plan = _Plan([])
    for turn_no, count in enumerate(counts, start=1):
        kinds = ["tool" if rng.random() < config.tool_call_probability else "think" for _ in range(count - 1)]
        prompt = (
            question
            if turn_no == 1
            else f"Follow-up: {words(rng, 5)}. {text(rng, _scaled(rng, 80, 400, config.text_scale))}"
        )
        plan.turns.append((prompt, [*kinds, "final"]))
    non_final = [(t, s) for t, (_, kinds) in enumerate(plan.turns, start=1) for s in range(len(kinds) - 1)]
    if sub and non_final:
        turn_no, step_no = rng.choice(non_final)
        plan.turns[turn_no - 1][1][step_no] = "spawn"
        plan.subagent_steps = sub
    last_turn = len(plan.turns)
    if fault in PRE_ATTEMPT_FAULTS:
        turn_no = rng.randrange(last_turn) + 1
        plan.outcomes[(turn_no, rng.randrange(len(plan.turns[turn_no - 1][1])))] = "pre"
    elif fault == "hollow_turn":
        turn_no = rng.randrange(last_turn) + 1
        plan.outcomes[(turn_no, len(plan.turns[turn_no - 1][1]) - 1)] = "hollow"
    elif fault == "ended_on_failed_call":
        plan.outcomes[(last_turn, len(plan.turns[-1][1]) - 1)] = "failed"
    return plan


def build_rollout(
    rng: random.Random,
    config: SyntheticConfig,
    question: str,
    identity: tuple[int, int, int],
    window: tuple[float, float],
    fault: str | None,
) -> BuiltRollout:
    """Lay out one rollout of ``identity = (task, rollout, attempt)`` inside ``window``."""
    task_index, rollout_index, attempt_index = identity
    dialect = "chat" if rng.random() < config.chat_dialect_probability else "responses"
    rollout_id = f"{task_index}-{rollout_index}" + (f"-a{attempt_index}" if attempt_index > 0 else "")
    out = BuiltRollout(task_id=str(task_index), rollout_id=rollout_id, dialect=dialect)
    plan = _main_plan(rng, config, question, fault)
    start, end = window
    judged = rng.random() < config.judge_call_probability
    agent_end = end - min(5.0, 0.03 * (end - start)) if judged else end
    answer = _Walker(rng, config, out, fault).invocation(
        "main", plan, Timing(start + min(0.5, 0.01 * (end - start)), agent_end), None, None
    )
    if judged:
        out.auxiliary_calls.append(judge_call(rng, question[:2000], answer[:2000], Timing(agent_end, end)))
    return out
