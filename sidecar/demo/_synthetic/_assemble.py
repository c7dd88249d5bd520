"""Turn a laid-out rollout into the result row the collector writes (usage, capture, trajectory)."""

from __future__ import annotations

import random
from typing import Any

from . import _items as items
from ._calls import MAX_OUTPUT_TOKENS, MODEL_NAME
from ._config import SyntheticConfig
from ._faults import apply_row_fault, apply_trajectory_fault
from ._rollout import BuiltRollout
from ._text import hex_id

__all__ = ["assemble_row"]

JSON = dict[str, Any]


def _tokens(calls: list[JSON], name: str) -> int:
    return sum(c["token_stats"][name] or 0 for c in calls)


def _usage(calls: list[JSON]) -> JSON:
    """Top-level usage: the sum over every captured call, as the agent reports it."""
    prompt, completion = _tokens(calls, "prompt_tokens"), _tokens(calls, "completion_tokens")
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": _tokens(calls, "cached_tokens")},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": _tokens(calls, "reasoning_tokens")},
        "total_tokens": prompt + completion,
    }


def _capture(built: BuiltRollout) -> JSON:
    """``ng_model_call_capture``: per-call metadata without the request/response bodies."""
    calls: list[JSON] = []
    for index, call in enumerate(built.model_calls):
        meta, stats = call["response_metadata"], call["token_stats"]
        response = call["response"] or {}
        tool_names = [o.get("name") for o in response.get("output", ()) if o.get("type") == "function_call"]
        calls.append(
            {
                "model_call_id": call["model_call_id"],
                "response_id": meta["response_id"],
                "call_index": index,
                "model_ref": meta["model_ref"],
                "model": meta["model"],
                "dialect": meta["dialect"],
                "status_code": meta["status_code"],
                "response_status": meta["response_status"],
                "finish_reason": meta["finish_reason"],
                "started_at": call["started_at"],
                "completed_at": call["completed_at"],
                "tokens_in": stats["prompt_tokens"],
                "tokens_out": stats["completion_tokens"],
                "tokens_reasoning": stats["reasoning_tokens"],
                "tokens_total": stats["total_tokens"],
                "tool_calls": tool_names,
                "cached_tokens": stats["cached_tokens"],
                "error_category": meta["error_category"],
                "latency_total_ms": call["duration_ms"],
                "latency_ttft_ms": meta["latency_ttft_ms"],
            }
        )
    metrics = {
        "tokens_in": _tokens(built.model_calls, "prompt_tokens"),
        "tokens_out": _tokens(built.model_calls, "completion_tokens"),
        "tokens_total": _tokens(built.model_calls, "total_tokens"),
        "latency_total_ms": round(sum(c["duration_ms"] or 0.0 for c in built.model_calls), 3),
        "num_calls": len(built.model_calls),
    }
    return {"rollout_id": built.rollout_id, "metrics": metrics, "calls": calls}


def create_params(question: str) -> JSON:
    """``responses_create_params`` of a task, as the materialized input row carries it."""
    return {
        "input": [{"role": "user", "content": question, "type": "message"}],
        "max_output_tokens": MAX_OUTPUT_TOKENS,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "temperature": 1.0,
    }


def assemble_row(
    built: BuiltRollout,
    config: SyntheticConfig,
    question: str,
    identity: tuple[int, int, int],
    completed_at: float,
    fault: str | None,
    rng: random.Random,
) -> JSON:
    """The result row, keys in the order the agent reply and the collector's stamping give them."""
    task_index, rollout_index, attempt_index = identity
    usage = _usage(built.model_calls)  # the agent's own calls: a judge's tokens are not the rollout's
    apply_trajectory_fault(built, fault, rng)
    built.model_calls.extend(built.auxiliary_calls)
    reward = 1.0 if rng.random() < 0.55 else 0.0
    row: JSON = {
        "responses_create_params": create_params(question),
        "response": items.responses_response(
            f"resp_{hex_id(rng)}", MODEL_NAME, round(completed_at, 3), built.final_output, usage
        ),
        "reward": reward,
        "failure_reason": None,
        "turns_used": sum(1 for t in built.turns if t["invocation_id"] == "main"),
        "finished_naturally": all(i["status"] == "completed" for i in built.invocations),
        "task_name": f"synthetic_task_{task_index % 17}",
        "_ng_task_index": task_index,
        "_ng_rollout_index": rollout_index,
        "agent_ref": {"name": config.agent_name},
    }
    if attempt_index > 0:
        row["_ng_attempt_index"] = attempt_index
    if config.model_call_capture:
        row["ng_model_call_capture"] = _capture(built)
    row["ng_trajectory"] = {
        "schema_version": "1.0",
        "task_id": built.task_id,
        "rollout_id": built.rollout_id,
        "invocations": built.invocations,
        "turns": built.turns,
        "model_calls": built.model_calls,
        "tool_calls": built.tool_calls,
        "gaps": built.gaps,
    }
    apply_row_fault(row, fault, rng)
    return row
