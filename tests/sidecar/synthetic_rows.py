"""One synthetic result row: an agent run and its captured model calls, as NeMo Gym writes it.

Steps are laid out in time order, so ``model_calls`` is in completion order and every policy call
is referenced by its turn and invocation. A fault is laid out (an extra discarded attempt, a hollow
turn, a failed last call, a rejected prompt) or is a field edit afterwards.
"""

from __future__ import annotations

import functools
import itertools
import random
from typing import TYPE_CHECKING, Any, Final

import orjson

if TYPE_CHECKING:
    from tests.sidecar.synthetic import SyntheticConfig

JSON = dict[str, Any]
Plan = list[tuple[str, list[str]]]
"""Per user turn: its message and its steps' kinds (``tool``, ``think``, ``spawn``, ``final``)."""

MODEL: Final = "gym-policy-model"
MAX_OUTPUT_TOKENS: Final = 8192
_TOKENS: Final = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens", "cached_tokens")
_PRE_ATTEMPT: Final = {
    "failed_model_call": "failed",
    "runaway_generation": "runaway",
    "zero_completion_tokens": "empty",
}
"""Faults laid out as an extra attempt just before a step, which is then retried and succeeds."""
_UNOBSERVING_GAPS: Final = (
    "turns_unavailable",
    "turn_model_call_scope_incomplete",
    "model_calls_unavailable",
    "model_call_capture_incomplete",
    "trajectory_projection_failed",
)
_TOOLS: Final = (("shell", "command"), ("read_file", "path"), ("search", "query"), ("task", "description"))
_WORDS: Final = (
    "the of and to in is that for it as with on be by this are from at or not which have model agent task "
    "file function value return result error test check input output token state node cache queue batch "
    "request response server client session config path line index buffer stream event we need first then "
    "next finally verify answer because suppose consider therefore compute integer list string number matrix "
    'vector sum prime factor divisor remainder done.\n\n `x = f(n)` "quoted" é → π² 日本'
)


@functools.cache
def _corpus() -> str:
    """~700 KB of pseudo-prose (some non-ASCII, quotes and newlines) that every text is sliced from."""
    return " ".join(random.Random(0x5EED).choices(_WORDS.split(" "), k=1 << 17))


def text(rng: random.Random, length: int) -> str:
    """``length`` characters at a random offset of the corpus: a multi-KB string costs one slice."""
    corpus = _corpus()
    if length >= len(corpus):
        corpus *= length // len(corpus) + 1
    start = int(rng.random() * (len(corpus) - length))
    return corpus[start : start + max(0, length)]


def _hex(rng: random.Random, bits: int = 128) -> str:
    return f"{rng.getrandbits(bits):0{bits // 4}x}"


def _scaled(rng: random.Random, low: int, high: int, scale: float) -> int:
    low, high = max(8, int(low * scale)), max(16, int(high * scale))
    return low + int(rng.random() * (high - low + 1))


def task_question(seed: int, task_index: int, scale: float) -> str:
    """The task's prompt, shared by every repeat (``scale`` shrinks it with the payload)."""
    rng = random.Random(f"task:{seed}:{task_index}")
    return f"Task {task_index}: " + text(rng, _scaled(rng, 200, 900, scale))


def create_params(question: str) -> JSON:
    """``responses_create_params`` of a task, as the materialized input row carries it."""
    return {
        "input": [{"role": "user", "content": question, "type": "message"}],
        "max_output_tokens": MAX_OUTPUT_TOKENS,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "temperature": 1.0,
    }


def _message(rng: random.Random, content: str) -> JSON:
    part = {"type": "output_text", "text": content, "annotations": []}
    item_id = f"msg_{_hex(rng)}"
    return {"type": "message", "id": item_id, "role": "assistant", "status": "completed", "content": [part]}


def _tokens(prompt: int | None, completion: int | None, reasoning: int | None, cached: int | None) -> JSON:
    total = None if prompt is None or completion is None else prompt + completion
    return dict(zip(_TOKENS, (prompt, completion, reasoning, total, cached), strict=True))


def responses_response(
    rng: random.Random, created: float, output: list[JSON], stats: JSON, runaway: bool
) -> JSON:
    """A Responses-API response object as the model server returns it; ``stats`` as ``_tokens`` gives."""
    prompt, completion = stats["prompt_tokens"], stats["completion_tokens"]
    return {
        "id": f"resp_{_hex(rng)}",
        "object": "response",
        "created_at": float(int(created)),
        "model": MODEL,
        "status": "incomplete" if runaway else "completed",
        "incomplete_details": {"reason": "max_output_tokens"} if runaway else None,
        "error": None,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "usage": {
            "input_tokens": prompt, "input_tokens_details": {"cached_tokens": stats["cached_tokens"] or 0},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": stats["reasoning_tokens"] or 0},
            "total_tokens": prompt + completion,
        },
    }


def _meta(call_id: str, response_id: str | None, ref: JSON, model: str, finish: str, ttft: Any) -> JSON:
    """A successful call's ``response_metadata`` (``model_call_id`` is moved out by ``_captured``)."""
    return {
        "model_call_id": call_id, "response_id": response_id, "model_ref": ref, "model": model,
        "dialect": "responses", "status_code": 200, "response_status": None, "finish_reason": finish,
        "error_category": None, "latency_ttft_ms": ttft,
    }


def _captured(span: tuple[float, float], request: JSON, response: JSON, stats: JSON, meta: JSON) -> JSON:
    """A captured model call (``ng_trajectory.model_calls[i]``)."""
    start, end = span
    return {
        "model_call_id": meta.pop("model_call_id"), "started_at": round(start, 6),
        "completed_at": round(end, 6), "duration_ms": round((end - start) * 1000.0, 3), "request": request,
        "response": response, "response_metadata": meta, "token_stats": stats,
    }


class _Rollout:
    """The parts of one ``ng_trajectory``, filled in time order by :meth:`invocation`."""

    def __init__(self, rng: random.Random, config: SyntheticConfig, identity: tuple[int, int, int]) -> None:
        task, rollout, attempt = identity
        payload = config.payload_bytes_per_call
        self.rng, self.policy = rng, config.policy_model
        self.task_id, self.rollout_id = str(task), f"{task}-{rollout}" + (f"-a{attempt}" if attempt else "")
        self.scale = min(1.0, payload / 8192)
        # Of the bytes a call adds to a row, ~40% are its request and ~22% its response text (which
        # appears twice, in the response and the conversation); tools, turns and metadata the rest.
        self.request_chars, self.response_chars = int(payload * 0.40), max(64, int(payload * 0.22) - 300)
        tools = [{"type": "function", "name": name, "parameters": _schema(arg)} for name, arg in _TOOLS]
        self.tools = tools if payload >= 2048 else None  # tiny corpora stay tiny
        self.sandbox = f"sandbox-{_hex(rng, 48)}"
        self.prev_prompt = 0
        self.invocations, self.turns, self.calls, self.tool_calls, self.gaps, self.final_output = (
            list[JSON]() for _ in range(6)
        )

    def call(
        self, kind: str, outcome: str, conversation: list[JSON], context: int, span: tuple[float, float],
        tool_call: JSON | None,
    ) -> tuple[JSON, list[JSON]]:
        """One policy call of a ``kind`` step: captured; returns its reference and its output items.

        ``outcome``: ``ok``, ``failed`` (429/500), ``rejected`` (400), ``runaway`` (length-limited,
        empty), ``empty`` (0 completion tokens) or ``hollow`` (an empty final message).
        """
        rng = self.rng
        history = [conversation[0], *conversation[1:][-2:]]
        used = len(orjson.dumps(history)) + (800 if self.tools else 0)
        instructions = text(rng, max(min(200, self.request_chars // 4), self.request_chars - used))
        request: JSON = {"model": MODEL, "instructions": instructions, "input": history}
        request.update(max_output_tokens=MAX_OUTPUT_TOKENS, parallel_tool_calls=True, temperature=1.0)
        if self.tools is not None:
            request["tools"] = self.tools
        budget, reasoning, message = self.response_chars, "", ""
        if outcome == "ok" and kind in ("tool", "spawn"):
            reasoning = text(rng, budget)
        elif outcome == "ok" and kind == "think":
            message = text(rng, budget)
        elif outcome == "ok":
            reasoning, message = text(rng, budget // 2), text(rng, budget - budget // 2)
        output: list[JSON] = []
        if reasoning or outcome == "runaway":
            summary = [{"type": "summary_text", "text": reasoning}] if reasoning else []
            output.append({"type": "reasoning", "id": f"rs_{_hex(rng)}", "summary": summary})
        if message or outcome == "hollow":
            output.append(_message(rng, message))
        if tool_call is not None:
            output.append(tool_call)
        finish = "length" if outcome == "runaway" else "tool_calls" if tool_call else "stop"
        call_id = _hex(rng)
        ttft = round((span[1] - span[0]) * 1000.0 * rng.uniform(0.05, 0.4), 2)
        meta = _meta(call_id, None, self.model_ref(), MODEL, finish, ttft)
        if outcome in ("failed", "rejected"):
            status = 400 if outcome == "rejected" else 429 if rng.random() < 0.7 else 500
            category = {400: "context_length_exceeded", 429: "rate_limited"}.get(status, "upstream_error")
            response = {"error": {"message": f"upstream returned {status}", "type": category, "code": status}}
            stats, output = _tokens(None, None, None, None), []
            meta |= {"status_code": status, "finish_reason": None, "error_category": category}
            meta["latency_ttft_ms"] = None
        else:
            prompt = (len(instructions) + context) // 4 + 16
            chars = len(reasoning) + len(message) + (len(tool_call["arguments"]) if tool_call else 0)
            completion = {"runaway": MAX_OUTPUT_TOKENS, "empty": 0}.get(outcome, max(1, chars // 4))
            stats = _tokens(prompt, completion, len(reasoning) // 4, min(self.prev_prompt, prompt) // 16 * 16)
            response = responses_response(rng, span[0], output, stats, outcome == "runaway")
            meta |= {"response_id": response["id"], "response_status": response["status"]}
            self.prev_prompt = prompt
        call = _captured(span, request, response, stats, meta)
        self.calls.append(call)
        ref = {"model_call_id": call["model_call_id"], "model_ref": self.model_ref()}
        return ref | {"response_id": meta["response_id"]}, output

    def model_ref(self) -> JSON:
        return {"type": "responses_api_models", "name": self.policy}

    def invocation(
        self, invocation_id: str, plan: Plan, outcomes: dict[tuple[int, int], str], span: tuple[float, float],
        spawned: tuple[str, str] | None = None, sub_steps: int = 0,
    ) -> str:
        """Run one agent invocation inside ``span``; returns the text of its last answer.

        ``outcomes``: the non-``ok`` steps by ``(turn_no, step_no)``: ``pre-<outcome>`` (an extra
        attempt before the step), ``hollow``, ``failed`` or ``rejected``; ``spawned``: a subagent's
        parent invocation and tool call.
        """
        rng = self.rng
        parent, by = spawned or (None, None)
        record: JSON = {
            "kind": "agent_invocation", "invocation_id": invocation_id, "parent_invocation_id": parent,
            "spawned_by_tool_call_id": by, "status": "completed",
            "duration_ms": round((span[1] - span[0]) * 1000.0, 3), "error_type": None, "model_calls": [],
            "conversation": [],
        }
        self.invocations.append(record)
        conversation: list[JSON] = record["conversation"]
        weights = [rng.uniform(0.4, 1.6) for _ in range(sum(len(kinds) for _, kinds in plan))]
        unit = (span[1] - span[0]) / sum(weights)
        slots = itertools.pairwise(
            itertools.accumulate((weight * unit for weight in weights), initial=span[0])
        )
        last_answer, context = "", 0
        for turn_no, (question, kinds) in enumerate(plan, start=1):
            conversation.append(
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]}
            )
            context += len(question)
            refs: list[JSON] = []
            answer: list[JSON] | None = None
            end = span[0]
            for step_no, kind in enumerate(kinds):
                start, end = next(slots)
                outcome = outcomes.get((turn_no, step_no), "ok")
                tools_at = end if kind in ("think", "final") else start + (end - start) * 0.6
                if outcome.startswith("pre-"):
                    cut = start + (tools_at - start) * 0.3
                    refs.append(self.call(kind, outcome[4:], conversation, context, (start, cut), None)[0])
                    start, outcome = cut, "ok"
                tool_call = self._tool_call(kind) if kind in ("tool", "spawn") else None
                ref, output = self.call(kind, outcome, conversation, context, (start, tools_at), tool_call)
                refs.append(ref)
                if outcome in ("failed", "rejected"):
                    record["status"], record["error_type"] = "failed", "ModelCallError"
                    break
                answer = output
                conversation.extend(output)
                context += len(orjson.dumps(output))
                if kind == "final":
                    last_answer = "".join(i["content"][0]["text"] for i in output if i["type"] == "message")
                if tool_call is not None:
                    result = self._run_tool(kind, tool_call, invocation_id, (tools_at, end), sub_steps)
                    conversation.append(
                        {"type": "function_call_output", "call_id": tool_call["call_id"], "output": result}
                    )
                    context += len(result)
            self.turns.append({
                "invocation_id": invocation_id, "task_id": self.task_id, "rollout_id": self.rollout_id,
                "turn_no": turn_no, "timestamp": round(end, 6), "question": question, "answer": answer,
                "reasoning_content": None, "resolved": None, "step_count": len(refs), "model_calls": refs,
            })
            record["model_calls"].extend(refs)
            if spawned is None and answer:
                self.final_output = answer
        return last_answer or text(rng, 200)

    def _tool_call(self, kind: str) -> JSON:
        rng = self.rng
        name, arg = _TOOLS[-1] if kind == "spawn" else rng.choice(_TOOLS[:-1])
        length = _scaled(rng, 60, 300, self.scale) if kind == "spawn" else 20 + int(rng.random() * 50)
        item_id, call_id = f"fc_{_hex(rng)}", f"call_{_hex(rng, 96)}"
        arguments = orjson.dumps({arg: text(rng, length)}).decode()
        return {
            "type": "function_call", "id": item_id, "call_id": call_id, "name": name,
            "arguments": arguments, "status": "completed",
        }

    def _run_tool(
        self, kind: str, tool_call: JSON, invocation_id: str, span: tuple[float, float], sub_steps: int
    ) -> str:
        """Execute a tool call, or run the subagent it spawns, inside ``span``; returns its output."""
        rng = self.rng
        status, error_type = "completed", None
        if kind == "spawn":
            description = orjson.loads(tool_call["arguments"])["description"]
            sub_plan: Plan = [(description, ["tool"] * (sub_steps - 1) + ["final"])]
            inner, parent = (
                (span[0] + 0.01 * (span[1] - span[0]), span[1]),
                (invocation_id, tool_call["call_id"]),
            )
            saved, self.prev_prompt = self.prev_prompt, 0  # a subagent's prompts share no cached prefix
            sub_id = f"{invocation_id}.sub{len(self.invocations)}"
            result = self.invocation(sub_id, sub_plan, {}, inner, parent)[:2000]
            self.prev_prompt = saved
        else:
            result = text(rng, _scaled(rng, 100, 700, self.scale))
            if rng.random() < 0.05:
                status, error_type = "failed", "CommandError"
                result = f"Error: command exited with status 1\n{result[:200]}"
        self.tool_calls.append({
            "kind": "tool_call", "invocation_id": invocation_id, "tool_call_id": tool_call["call_id"],
            "sandbox_id": None if kind == "spawn" else self.sandbox, "tool_name": tool_call["name"],
            "started_at": round(span[0], 6), "completed_at": round(span[1], 6),
            "duration_ms": round((span[1] - span[0]) * 1000.0, 3), "timing_source": "harness",
            "status": status, "error_type": error_type, "output": result,
        })
        return result


def _schema(arg: str) -> JSON:
    properties = {arg: {"type": "string"}}
    return {"type": "object", "properties": properties, "required": [arg], "additionalProperties": False}


def _plan(
    rng: random.Random, config: SyntheticConfig, question: str, fault: str | None, scale: float
) -> tuple[Plan, dict[tuple[int, int], str], int]:
    """The main agent's turns, its non-``ok`` steps and its subagent's step count (0: none)."""
    if fault == "broken_task":  # the prompt is rejected at once and the agent gives up
        return [(question, ["final"])], {(1, 0): "rejected"}, 0
    mean = config.model_calls_per_rollout
    calls = max(1, round(rng.triangular(1, 2 * mean - 1, mean))) if mean > 1 else 1
    if fault in _PRE_ATTEMPT:
        calls = max(1, calls - 1)  # the extra attempt keeps the call count on target
    sub = (
        rng.randint(1, max(1, calls // 3)) if calls >= 4 and rng.random() < config.subagent_probability else 0
    )
    counts = [1] * min(config.turns, calls - sub)
    for _ in range(calls - sub - len(counts)):
        counts[rng.randrange(len(counts))] += 1
    if fault == "ended_on_failed_call" and counts[-1] < 2:
        counts[-1] += 1  # a successful step before the failed one, so the turn is not also hollow
    plan: Plan = []
    for turn_no, count in enumerate(counts, start=1):
        prompt = question if turn_no == 1 else "Follow-up: " + text(rng, _scaled(rng, 80, 400, scale))
        kinds = ["tool" if rng.random() < config.tool_call_probability else "think" for _ in range(count - 1)]
        plan.append((prompt, [*kinds, "final"]))
    non_final = [(t, s) for t, (_, kinds) in enumerate(plan) for s in range(len(kinds) - 1)]
    if sub and non_final:
        turn, step = rng.choice(non_final)
        plan[turn][1][step] = "spawn"
    outcomes: dict[tuple[int, int], str] = {}
    turn_no = rng.randrange(len(plan)) + 1
    if fault in _PRE_ATTEMPT:
        outcomes[(turn_no, rng.randrange(len(plan[turn_no - 1][1])))] = "pre-" + _PRE_ATTEMPT[fault]
    elif fault == "hollow_turn":
        outcomes[(turn_no, len(plan[turn_no - 1][1]) - 1)] = "hollow"
    elif fault == "ended_on_failed_call":
        outcomes[(len(plan), len(plan[-1][1]) - 1)] = "failed"
    return plan, outcomes, sub if non_final else 0


def _edit(rollout: _Rollout, fault: str | None, rng: random.Random) -> None:
    """The faults that are field edits of a laid-out trajectory."""
    succeeded = [call for call in rollout.calls if call["response_metadata"]["status_code"] == 200]
    if fault == "missing_turns":  # a harness that records calls but no turns, and does not say so
        rollout.turns.clear()
    elif fault == "missing_token_counts":
        stats = rng.choice(succeeded)["token_stats"]
        dropped = rng.choice((("prompt_tokens",), ("completion_tokens",), _TOKENS[:2]))
        stats |= dict.fromkeys((*dropped, "total_tokens"))
    elif fault == "capture_mismatch" and rng.random() < 0.5:  # a referenced call missing from the capture
        rollout.calls.remove(rng.choice(rollout.calls))
    elif fault == "capture_mismatch":  # the producer says two owners claim a call
        detail = f"call:{rng.choice(succeeded)['model_call_id']}"
        code = "model_call_reference_conflict"
        rollout.gaps.append({"code": code, "invocation_id": "main", "detail": detail})
    elif fault == "malformed_response":  # a gateway flattened a length-limited chat message to a string
        call = rng.choice(succeeded)
        call["response_metadata"]["finish_reason"] = "length"
        choice = {"index": 0, "finish_reason": "length", "message": "[truncated]"}
        response_id = call["response_metadata"]["response_id"]
        call["response"] = {"id": response_id, "object": "chat.completion", "choices": [choice]}
    elif fault == "observation_gap":
        rollout.gaps.append({"code": rng.choice(_UNOBSERVING_GAPS), "invocation_id": None, "detail": None})


def build_row(
    config: SyntheticConfig, seed: int, identity: tuple[int, int, int], span: tuple[float, float],
    fault: str | None, rng: random.Random,
) -> JSON:
    """The result row of ``identity = (task, rollout, attempt)`` run over ``span``."""
    rollout = _Rollout(rng, config, identity)
    question = task_question(seed, identity[0], rollout.scale)
    plan, outcomes, sub_steps = _plan(rng, config, question, fault, rollout.scale)
    start, end = span
    judged = rng.random() < config.judge_call_probability
    agent_end = end - min(5.0, 0.03 * (end - start)) if judged else end
    answer = rollout.invocation(
        "main", plan, outcomes, (start + min(0.5, 0.01 * (end - start)), agent_end), None, sub_steps
    )
    totals = {key: sum(call["token_stats"][key] or 0 for call in rollout.calls) for key in _TOKENS}
    _edit(rollout, fault, rng)
    if judged:  # a grading call on another model, referenced by no invocation: not in the agent's usage
        prompt = (
            f"Question:\n{question[:2000]}\n\nCandidate answer:\n{answer[:2000]}\n\nIs the answer correct?"
        )
        stats = _tokens(len(prompt) // 4 + 24, 4, 0, 0)
        response = responses_response(rng, agent_end, [_message(rng, "Verdict: correct.")], stats, False)
        judge_ref = {"type": "responses_api_models", "name": "judge_model"}
        judge = _meta(_hex(rng), response["id"], judge_ref, "gym-judge-model", "stop", None)
        judge["response_status"] = "completed"
        request = {"model": "gym-judge-model", "input": prompt}
        rollout.calls.append(_captured((agent_end, end), request, response, stats, judge))
    response = responses_response(rng, end, rollout.final_output, totals, False)
    row: JSON = {
        "responses_create_params": create_params(question), "response": response,
        "reward": 1.0 if rng.random() < 0.55 else 0.0, "failure_reason": None, "turns_used": len(plan),
        "finished_naturally": all(invocation["status"] == "completed" for invocation in rollout.invocations),
        "task_name": f"synthetic_task_{identity[0] % 17}", "_ng_task_index": identity[0],
        "_ng_rollout_index": identity[1], "agent_ref": {"name": config.agent_name},
    }
    if identity[2]:
        row["_ng_attempt_index"] = identity[2]
    row["ng_trajectory"] = {
        "schema_version": "1.0", "task_id": rollout.task_id, "rollout_id": rollout.rollout_id,
        "invocations": rollout.invocations, "turns": rollout.turns, "model_calls": rollout.calls,
        "tool_calls": rollout.tool_calls, "gaps": rollout.gaps,
    }
    if fault == "token_count_mismatch":
        usage = row["response"]["usage"]
        usage[rng.choice(("input_tokens", "output_tokens"))] += rng.randint(1, 2000)
        usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    elif fault == "no_trajectory":  # a row from before trajectories were captured
        del row["ng_trajectory"]
    elif fault == "invalid_trajectory":  # schema drift: an unknown key or a negative duration
        call = rng.choice(rollout.calls)
        if rng.random() < 0.5:
            call["token_stats"]["audio_tokens"] = 0
        else:
            call["duration_ms"] = -call["duration_ms"] - 1.0
    return row
