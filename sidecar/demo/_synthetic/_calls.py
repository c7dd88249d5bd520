"""One captured policy-model call: request, response, metadata and token stats, in either dialect."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Final

from . import _items as items
from ._text import hex_id, text

__all__ = ["MAX_OUTPUT_TOKENS", "MODEL_NAME", "CallFactory", "Timing", "judge_call", "output_chars"]

JSON = dict[str, Any]

MODEL_NAME: Final = "gym-policy-model"
MAX_OUTPUT_TOKENS: Final = 8192
# Shares of ``payload_bytes_per_call`` (the bytes one call adds to a row): the request, and the
# response text, which appears twice (the captured response and the invocation conversation);
# the rest goes to tool outputs, turns and the capture metadata.
_REQUEST_SHARE: Final = 0.40
_RESPONSE_SHARE: Final = 0.22
_CLIP: Final = 300
_MIN_TEXT: Final = 64
_TOKEN_FIELDS: Final = (
    "prompt_tokens",
    "completion_tokens",
    "reasoning_tokens",
    "total_tokens",
    "cached_tokens",
)
_ERROR_CATEGORIES: Final = {400: "context_length_exceeded", 429: "rate_limited"}
_TOOLS_FROM: Final = 2048
"""Requests list the tool schemas only from this payload up, so that tiny corpora stay tiny."""


@dataclass(frozen=True, slots=True)
class Timing:
    """A wall-clock interval in epoch seconds."""

    start: float
    end: float


@dataclass(slots=True)
class _Content:
    reasoning: str
    message: str
    finish: str
    output: list[JSON]


def _clip_item(item: JSON) -> JSON:
    """A copy of a conversation item with long texts cut, for the bounded request history."""
    kind = item["type"]
    if kind == "function_call_output":
        return {**item, "output": item["output"][:_CLIP]}
    if kind == "message":
        part = item["content"][0]
        return {**item, "content": [{**part, "text": part["text"][:_CLIP]}]}
    if kind == "reasoning":
        return {**item, "summary": [{**s, "text": s["text"][:_CLIP]} for s in item["summary"]]}
    return item


def output_chars(output: list[JSON]) -> int:
    """Characters of text in Responses output items (a cheap stand-in for their token weight)."""
    total = 0
    for item in output:
        kind = item["type"]
        if kind == "message":
            total += len(item["content"][0]["text"])
        elif kind == "reasoning":
            total += sum(len(part["text"]) for part in item["summary"])
        elif kind == "function_call":
            total += len(item["arguments"])
    return total


class CallFactory:
    """Makes the captured calls of one rollout; remembers the last prompt for prefix-cache hits.

    ``outcome`` is ``ok``, ``failed`` (429/500), ``rejected`` (400: prompt too long),
    ``runaway`` (length-limited, empty output),
    ``empty`` (0 completion tokens) or ``hollow`` (an empty final message).
    """

    def __init__(self, rng: random.Random, dialect: str, payload_bytes: int, policy_model: str):
        self.rng = rng
        self.dialect = dialect
        self.chat = dialect == "chat"
        self.policy_model = policy_model
        self.request_budget = int(payload_bytes * _REQUEST_SHARE)
        self.response_budget = max(_MIN_TEXT, int(payload_bytes * _RESPONSE_SHARE) - 300)
        self.prev_prompt = 0
        self.with_tools = payload_bytes >= _TOOLS_FROM
        self._tools: list[JSON] | None = None  # one copy per rollout, shared by its requests

    def model_ref(self) -> JSON:
        return {"type": "responses_api_models", "name": self.policy_model}

    def ref(self, call: JSON) -> JSON:
        """The ``ModelCallRef`` a turn or invocation uses to point at ``call``."""
        return {
            "model_call_id": call["model_call_id"],
            "model_ref": self.model_ref(),
            "response_id": call["response_metadata"]["response_id"],
        }

    def request(self, conversation: list[JSON]) -> JSON:
        """The request body: instructions, the prompt and the recent (clipped) history, the tools."""
        history = [conversation[0], *(_clip_item(i) for i in conversation[1:][-2:])]
        used = 1600 + len(conversation[0]["content"][0]["text"]) + 400 * (len(history) - 1)
        instructions = text(self.rng, max(min(200, self.request_budget // 4), self.request_budget - used))
        request: JSON
        if self.chat:
            request = {
                "model": MODEL_NAME,
                "messages": [{"role": "system", "content": instructions}, *items.to_chat_messages(history)],
                "max_tokens": MAX_OUTPUT_TOKENS,
                "stream": False,
            }
            if self.with_tools:
                request["tools"] = self._tools = self._tools or items.chat_tools()
            return request
        request = {"model": MODEL_NAME, "instructions": instructions, "input": history}
        if self.with_tools:
            request["tools"] = self._tools = self._tools or items.responses_tools()
        request.update(max_output_tokens=MAX_OUTPUT_TOKENS, parallel_tool_calls=True, temperature=1.0)
        return request

    def _content(self, kind: str, outcome: str, tool_call: JSON | None) -> _Content:
        rng, budget = self.rng, self.response_budget
        reasoning = message = ""
        finish = "length" if outcome == "runaway" else "stop"
        if outcome == "ok":
            if kind in ("tool", "spawn"):
                reasoning, finish = text(rng, budget), "tool_calls"
            elif kind == "think":
                message = text(rng, budget)
            else:
                reasoning, message = text(rng, budget // 2), text(rng, budget - budget // 2)
        output: list[JSON] = []
        if self.chat:
            if message:
                output.append(items.assistant_message_item(rng, message))
        else:
            if reasoning or outcome == "runaway":
                output.append(items.reasoning_item(rng, reasoning))
            if message or outcome == "hollow":
                output.append(items.assistant_message_item(rng, message))
        if tool_call is not None and outcome == "ok":
            output.append(tool_call)
        return _Content(reasoning, message, finish, output)

    def _response(
        self, content: _Content, outcome: str, response_id: str, created: float, tokens: JSON
    ) -> JSON:
        prompt, completion = tokens["prompt_tokens"], tokens["completion_tokens"]
        if self.chat:
            body: str | None = content.message
            if content.reasoning:
                body = f"<think>{content.reasoning}</think>{content.message}"
            calls = [i for i in content.output if i["type"] == "function_call"]
            tool_calls = items.to_chat_messages(calls)[0]["tool_calls"] if calls else None
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
            body = None if outcome == "runaway" else body
            return items.chat_response(
                response_id, MODEL_NAME, created, body, tool_calls, content.finish, usage
            )
        usage = {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": tokens["cached_tokens"]},
            "output_tokens": completion,
            "output_tokens_details": {"reasoning_tokens": tokens["reasoning_tokens"]},
            "total_tokens": prompt + completion,
        }
        return items.responses_response(
            response_id, MODEL_NAME, created, content.output, usage, incomplete=outcome == "runaway"
        )

    def _tokens(self, request: JSON, content: _Content, outcome: str, context_chars: int) -> JSON:
        system = request["instructions"] if "instructions" in request else request["messages"][0]["content"]
        prompt = (len(system) + context_chars) // 4 + 16
        completion = max(1, output_chars(content.output) // 4)
        if outcome == "runaway":
            completion = MAX_OUTPUT_TOKENS
        elif outcome == "empty":
            completion = 0
        cached = None if self.chat else min(self.prev_prompt, prompt) // 16 * 16
        self.prev_prompt = prompt
        return {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "reasoning_tokens": None if self.chat else len(content.reasoning) // 4,
            "total_tokens": prompt + completion,
            "cached_tokens": cached,
        }

    def _error(self, outcome: str, metadata: JSON) -> tuple[JSON, JSON]:
        """Error body and (all-null) token stats of a failed call; updates ``metadata`` in place."""
        status = 400 if outcome == "rejected" else (429 if self.rng.random() < 0.7 else 500)
        error = {400: "invalid_request_error", 429: "rate_limit_error"}.get(status, "server_error")
        metadata.update(
            status_code=status,
            finish_reason=None,
            error_category=_ERROR_CATEGORIES.get(status, "upstream_error"),
            latency_ttft_ms=None,
        )
        response = {"error": {"message": f"upstream returned {status}", "type": error, "code": status}}
        return response, dict.fromkeys(_TOKEN_FIELDS)

    def make(
        self,
        kind: str,
        outcome: str,
        conversation: list[JSON],
        timing: Timing,
        context_chars: int,
        tool_call: JSON | None,
    ) -> tuple[JSON, list[JSON]]:
        """One captured call of step ``kind``; returns it and the Responses output items it produced."""
        rng = self.rng
        request = self.request(conversation)
        content = self._content(kind, outcome, tool_call)
        duration_ms = round((timing.end - timing.start) * 1000.0, 3)
        metadata: JSON = {
            "response_id": None,
            "model_ref": self.model_ref(),
            "model": MODEL_NAME,
            "dialect": self.dialect,
            "status_code": 200,
            "response_status": None,
            "finish_reason": content.finish,
            "error_category": None,
            "latency_ttft_ms": round(duration_ms * rng.uniform(0.05, 0.4), 2),
        }
        if outcome in ("failed", "rejected"):
            response, tokens = self._error(outcome, metadata)
            content.output = []
        else:
            response_id = f"chatcmpl-{hex_id(rng, 64)}" if self.chat else f"resp_{hex_id(rng)}"
            tokens = self._tokens(request, content, outcome, context_chars)
            response = self._response(content, outcome, response_id, timing.start, tokens)
            metadata["response_id"] = response_id
            if not self.chat:
                metadata["response_status"] = response["status"]
        call = {
            "model_call_id": hex_id(rng),
            "started_at": round(timing.start, 6),
            "completed_at": round(timing.end, 6),
            "duration_ms": duration_ms,
            "request": request,
            "response": response,
            "response_metadata": metadata,
            "token_stats": tokens,
        }
        return call, content.output


def judge_call(rng: random.Random, question: str, answer: str, timing: Timing) -> JSON:
    """An auxiliary grading call on another model, captured but referenced by no invocation."""
    prompt = f"Question:\n{question}\n\nCandidate answer:\n{answer}\n\nIs the answer correct?"
    verdict = rng.choice(("Verdict: correct.", "Verdict: incorrect."))
    response_id = f"chatcmpl-{hex_id(rng, 64)}"
    tokens = {
        "prompt_tokens": len(prompt) // 4 + 24,
        "completion_tokens": len(verdict) // 4 + 1,
        "reasoning_tokens": None,
        "total_tokens": len(prompt) // 4 + len(verdict) // 4 + 25,
        "cached_tokens": None,
    }
    usage = {k: tokens[k] for k in ("prompt_tokens", "completion_tokens", "total_tokens")}
    duration_ms = round((timing.end - timing.start) * 1000.0, 3)
    return {
        "model_call_id": hex_id(rng),
        "started_at": round(timing.start, 6),
        "completed_at": round(timing.end, 6),
        "duration_ms": duration_ms,
        "request": {
            "model": "gym-judge-model",
            "messages": [
                {"role": "system", "content": "You grade answers. Reply with a verdict."},
                {"role": "user", "content": prompt},
            ],
            "max_tokens": 64,
        },
        "response": items.chat_response(
            response_id, "gym-judge-model", timing.start, verdict, None, "stop", usage
        ),
        "response_metadata": {
            "response_id": response_id,
            "model_ref": {"type": "responses_api_models", "name": "judge_model"},
            "model": "gym-judge-model",
            "dialect": "chat",
            "status_code": 200,
            "response_status": None,
            "finish_reason": "stop",
            "error_category": None,
            "latency_ttft_ms": round(duration_ms * 0.3, 2),
        },
        "token_stats": tokens,
    }
