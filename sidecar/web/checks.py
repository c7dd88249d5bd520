"""What each health check looks at, when it fires and what to do: the table of ``docs/report.md``.

The page links every check a finding names to this text (an anchor on the page itself), so the
explanation is there offline and in a saved file; a test keeps it equal to the docs.
"""

from __future__ import annotations

from typing import Final, NamedTuple

__all__ = ["CHECK_EXPLANATIONS", "CheckExplanation"]


class CheckExplanation(NamedTuple):
    looks_at: str
    fires_when: str
    what_to_do: str


CHECK_EXPLANATIONS: Final[dict[str, CheckExplanation]] = {
    "check_execution_error": CheckExplanation(
        "the other checks' execution",
        "a check raised on this row (detail names `failed_check`); that check is also unobserved",
        "look at the row's data the named check reads (in NeMo Gym 0.7.0: a malformed "
        "model-call `response`); report it if the row looks valid",
    ),
    "record_unreadable": CheckExplanation(
        "the line itself",
        "the line is not JSON / not an object (locator: file and line), or its "
        "`ng_trajectory` is not a valid trajectory record (no locator; detail says which)",
        "fix the writer of the file: a torn or hand-edited line, a truncated write, an "
        "incompatible producer",
    ),
    "rollout_duplicate_identity": CheckExplanation(
        "(`stage_index`, `_ng_task_index`, `_ng_rollout_index`) over the whole run",
        "two or more rows claim one identity (detail: `duplicate_count`); all copies become unhealthy",
        "a resumed run appended a rollout twice, or two runs share one file; keep one copy",
    ),
    "rollout_missing_agent_turns": CheckExplanation(
        "`ng_trajectory.turns`",
        "no agent turn had model activity (an empty `turns` list included)",
        "the agent never talked to the model: check the agent's startup, its model server"
        " address, and its error log",
    ),
    "rollout_ended_on_failed_model_call": CheckExplanation(
        "every captured model call, grouped by model",
        "a model's calls ended on a failure (the last call by `started_at` failed, or all"
        " failed); detail: model, status, error category, calls, successes",
        "the rollout's result rests on a failed call: check the model server's errors "
        "(status in detail), rate limits, timeouts",
    ),
    "agent_turn_hollow": CheckExplanation(
        "each turn",
        "a turn has neither a message nor tool calls (locator: turn number)",
        "the model returned empty output for that turn: check max tokens, stop sequences, output parsing",
    ),
    "model_call_zero_completion_tokens": CheckExplanation(
        "the rollout's own model calls",
        "a call reports 0 completion tokens",
        "the model produced nothing: check max tokens, stop sequences, content filters",
    ),
    "model_call_missing_token_counts": CheckExplanation(
        "the rollout's own model calls",
        "a call lacks `prompt_tokens` and/or `completion_tokens` (detail lists which)",
        "the model server does not report usage: enable usage reporting, or ignore this "
        "check for that server",
    ),
    "trajectory_capture_mismatch": CheckExplanation(
        "turn references to model calls vs the captured calls",
        "a turn references a call that was not captured, a call is captured twice, or "
        "ownership contradicts (detail: `kind`)",
        "the capture is incomplete or inconsistent: check the proxy / capture layer "
        "between agent and model server",
    ),
    "model_call_failed": CheckExplanation(
        "the rollout's own model calls",
        "a call failed (detail: status, error category, `terminal`: the last call of a complete capture)",
        "as 5; retried failures that later succeeded show here but not in 5",
    ),
    "rollout_token_count_mismatch": CheckExplanation(
        "the row's top-level `response.usage` vs the tokens of the turn-bound calls",
        "the two sums differ (detail: both sides)",
        "the reported usage does not match what was captured: a call outside the turns "
        "was counted, or capture missed one",
    ),
    "model_call_runaway_generation": CheckExplanation(
        "the rollout's own model calls",
        "a call stopped on the length limit (`finish_reason` `length` / "
        "`max_output_tokens` / `max_tokens`) with no content saved",
        "the model ran into max tokens without an answer (loops, over-long reasoning): "
        "raise the limit or fix the prompt",
    ),
    "task_consistently_unhealthy": CheckExplanation(
        "repeat verdicts of one task",
        "at least 2 repeats could be judged and all of them are unhealthy",
        "the task itself (its data, its environment, its verifier) is likely broken, not the model",
    ),
    "task_no_successful_model_calls": CheckExplanation(
        "repeats' turn-bound model calls",
        "every repeat was fully observed and none had a successful model call",
        "the task never reached the model successfully: check its model server configuration",
    ),
}
"""Registry order, as in the docs' table (14 checks)."""
