"""The rollout-level check rules and their check-specific evidence gates (generic gating by
the inputs a check reads is the walk's). A rule turns :class:`~health.evidence.Evidence` into
``(locator, detail)`` pairs in emission order; one that raises is a ``check_execution_error``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .content import has_tool_call, nonempty, response_has_content
from .evidence import CONTRADICTION_GAP_KINDS, LENGTH_FINISH_REASONS, Binding, Call, Evidence

__all__ = [
    "LENGTH_FINISH_REASONS",
    "ROLLOUT_RULES",
    "CheckRule",
    "RawFinding",
    "chains_ended_on_failure",
    "ended_chains",
]

RawFinding = tuple[dict[str, Any] | None, dict[str, Any]]
Rule = Callable[[Evidence], list[RawFinding]]
Gate = Callable[[Evidence, Binding], bool]

_NO_TURN_ACTIVITY = {"reason": "no agent turn with model activity"}
_HOLLOW = {"reason": "agent turn has no message or tool calls"}


@dataclass(frozen=True, slots=True)
class CheckRule:
    """How to run one rollout check once its generic input gates have passed.

    ``gate`` decides, given the binding view the check reads, whether the check has enough
    evidence; returning ``False`` makes it unobserved.
    """

    run: Rule
    gate: Gate | None = None


def _bound_locator(call: Call, position: int) -> dict[str, Any]:
    return {"call_id": str(call.model_call_id or call.response_id or position)}


def _turn_steps(ev: Evidence) -> list[tuple[int, bool, bool, bool]]:
    """Per turn: (turn_no, has_message, has_tool_calls, has_references).

    Raises ``TypeError`` for an unhashable ``type`` in an answer, every time it is asked, so
    both turn checks fail alike; a successful analysis is memoized on the evidence.
    """
    if ev.turn_steps is not None:
        return ev.turn_steps
    turns = ev.trajectory.turns if ev.trajectory is not None else []
    ev.turn_steps = [
        (
            turn.turn_no,
            nonempty(turn.answer) or nonempty(turn.reasoning_content),
            has_tool_call(turn.answer),
            bool(turn.model_calls),
        )
        for turn in turns
    ]
    return ev.turn_steps


def _missing_agent_turns(ev: Evidence) -> list[RawFinding]:
    for _, message, tools, refs in _turn_steps(ev):  # a loop: cheaper than any() over a generator
        if message or tools or refs:
            return []
    return [(None, dict(_NO_TURN_ACTIVITY))]


def _agent_turn_hollow(ev: Evidence) -> list[RawFinding]:
    return [
        ({"turn": turn_no}, dict(_HOLLOW))
        for turn_no, message, tools, _ in _turn_steps(ev)
        if not message and not tools
    ]


def _chain_order_key(call: Call) -> tuple[float, int]:
    return (call.started_at or 0.0, call.call_index or 0)


def chains_ended_on_failure(calls: Iterable[Call]) -> list[tuple[list[Call], Call]]:
    """Per-model chains whose last call failed, with that last call."""
    chains: dict[tuple[str, str] | None, list[Call]] = {}
    for call in calls:
        chain = chains.get(call.model_ref)
        if chain is None:
            chains[call.model_ref] = [call]
        else:
            chain.append(call)
    ended: list[tuple[list[Call], Call]] = []
    for chain in chains.values():
        failed = [call.failed for call in chain]
        if True not in failed:
            continue
        # the last call of the chain sorted stably by its order key, without the sort
        last = max(reversed(chain), key=_chain_order_key)
        if False not in failed or (last.failed and all(call.started_at is not None for call in chain)):
            ended.append((chain, last))
    return ended


def ended_chains(ev: Evidence) -> list[tuple[list[Call], Call]]:
    """:func:`chains_ended_on_failure` of the evidence's calls, computed once per rollout.

    Only a successful result is memoized, so a call that raises raises for every reader.
    """
    if ev.ended_chains is None:
        ev.ended_chains = chains_ended_on_failure(ev.calls) if ev.failed_calls else []
    return ev.ended_chains


def _ended_on_failed_call(ev: Evidence) -> list[RawFinding]:
    findings: list[RawFinding] = []
    if not ev.failed_calls:  # no chain can end on a failure
        return findings
    for chain, last in ended_chains(ev):
        model_ref = None if last.model_ref is None else f"{last.model_ref[0]}/{last.model_ref[1]}"
        locator = {"call_id": str(last.model_call_id or last.response_id or last.call_index)}
        detail = {
            "model_ref": model_ref,
            "status": last.status_code,
            "error_category": last.error_category,
            "observed_calls": len(chain),
            "successful_calls": sum(1 for call in chain if call.successful),
        }
        findings.append((locator, detail))
    return findings


def _unusual_owned(ev: Evidence) -> list[tuple[int, Call]]:
    """The :attr:`Call.unusual` owned calls with their positions among the owned calls, in order:
    only they can give a per-call check a finding or close the runaway check's gate."""
    if ev.unusual_owned is None:
        ev.unusual_owned = (
            [(position, call) for position, call in enumerate(ev.owned_binding.matched_calls) if call.unusual]
            if ev.unusual_calls
            else []
        )
    return ev.unusual_owned


def _zero_completion_tokens(ev: Evidence) -> list[RawFinding]:
    if not ev.unusual_calls:
        return []
    return [
        (_bound_locator(call, position), {"completion_tokens": 0})
        for position, call in _unusual_owned(ev)
        if call.tokens_out == 0
    ]


def _missing_token_counts(ev: Evidence) -> list[RawFinding]:
    findings: list[RawFinding] = []
    if not ev.unusual_calls:
        return findings
    for position, call in _unusual_owned(ev):
        missing = []
        if call.tokens_in is None:
            missing.append("prompt_tokens")
        if call.tokens_out is None:
            missing.append("completion_tokens")
        if missing:
            findings.append((_bound_locator(call, position), {"missing": missing}))
    return findings


def _after_last_colon(text: str) -> str:
    return text.rsplit(":", 1)[-1]


def _capture_mismatch(ev: Evidence) -> list[RawFinding]:
    binding = ev.owned_binding
    seen: set[tuple[str, str]] = set()
    findings: list[RawFinding] = []
    for key in binding.missing_references:
        locator = _after_last_colon(key)
        if ("missing_captured_call", locator) not in seen:
            seen.add(("missing_captured_call", locator))
            findings.append(({"call_id": locator}, {"kind": "missing_captured_call"}))
    for key, count in binding.duplicated_references:
        locator = _after_last_colon(key)
        if ("duplicated_captured_call", locator) not in seen:
            seen.add(("duplicated_captured_call", locator))
            findings.append(({"call_id": locator}, {"kind": "duplicated_captured_call", "count": count}))
    for gap in ev.gaps:
        kind = CONTRADICTION_GAP_KINDS.get(gap.code)
        if kind is None:
            continue
        locator = _after_last_colon(str(gap.detail or "unknown"))
        if (kind, locator) in seen:
            continue
        detail = {"kind": kind, "observation_gap": gap.code, "invocation_id": gap.invocation_id}
        findings.append(({"call_id": locator}, detail))
    return findings


def _model_call_failed(ev: Evidence) -> list[RawFinding]:
    if not ev.failed_calls:  # the matched calls are captured calls, none of which failed
        return []
    binding = ev.owned_binding
    matched = binding.matched_calls
    terminal_index = max(call.call_index for call in matched)
    complete = binding.complete
    return [
        (
            _bound_locator(call, position),
            {
                "status": call.status_code,
                "error_category": call.error_category,
                "terminal": complete and call.call_index == terminal_index,
            },
        )
        for position, call in _unusual_owned(ev)
        if call.failed
    ]


def _token_count_mismatch(ev: Evidence) -> list[RawFinding]:
    matched = ev.turn_binding.matched_calls
    if len(matched) == len(ev.calls):  # distinct calls, so every one: the evidence has the sums
        capture_prompt, capture_completion = ev.capture_prompt, ev.capture_completion
    else:
        capture_prompt = capture_completion = 0
        for call in matched:
            capture_prompt += call.tokens_in or 0
            capture_completion += call.tokens_out or 0
    transcript_prompt = ev.transcript_prompt or 0
    transcript_completion = ev.transcript_completion or 0
    if transcript_prompt == capture_prompt and transcript_completion == capture_completion:
        return []
    detail = {
        "transcript_prompt": transcript_prompt,
        "transcript_completion": transcript_completion,
        "capture_prompt": capture_prompt,
        "capture_completion": capture_completion,
    }
    return [(None, detail)]


def _runaway_generation(ev: Evidence) -> list[RawFinding]:
    if not ev.unusual_calls:
        return []
    return [
        (_bound_locator(call, position), {"finish_reason": call.finish_reason})
        for position, call in _unusual_owned(ev)
        if call.finish_reason in LENGTH_FINISH_REASONS and not response_has_content(call.response)
    ]


def _nothing(ev: Evidence) -> list[RawFinding]:
    """Checks whose findings come from elsewhere (runner, parser, duplicate post-pass)."""
    return []


def _matched_nonempty(ev: Evidence, view: Binding) -> bool:
    return bool(view.matched_calls)


def _capture_mismatch_gate(ev: Evidence, view: Binding) -> bool:
    return view.observed or ev.has_contradiction_gap


def _token_comparison_gate(ev: Evidence, view: Binding) -> bool:
    if not (ev.turn_call_scope_complete and view.complete and view.matched_calls and ev.usage_present):
        return False
    if ev.unusual_calls:  # only an unusual call can lack a token count
        for call in view.matched_calls:
            if call.tokens_in is None or call.tokens_out is None:
                return False
    return True


def _runaway_gate(ev: Evidence, view: Binding) -> bool:
    if not view.matched_calls:
        return False
    if not ev.unusual_calls:
        return True
    calls = [call for _, call in _unusual_owned(ev)] if view is ev.owned_binding else view.matched_calls
    for call in calls:  # noqa: SIM110 - a loop costs less than any() over a generator here
        if call.finish_reason in LENGTH_FINISH_REASONS and call.response is None:
            return False
    return True


ROLLOUT_RULES: dict[str, CheckRule] = {
    "check_execution_error": CheckRule(_nothing),
    "record_unreadable": CheckRule(_nothing),
    "rollout_duplicate_identity": CheckRule(_nothing),
    "rollout_missing_agent_turns": CheckRule(_missing_agent_turns),
    "rollout_ended_on_failed_model_call": CheckRule(_ended_on_failed_call),
    "agent_turn_hollow": CheckRule(_agent_turn_hollow),
    "model_call_zero_completion_tokens": CheckRule(_zero_completion_tokens, _matched_nonempty),
    "model_call_missing_token_counts": CheckRule(_missing_token_counts, _matched_nonempty),
    "trajectory_capture_mismatch": CheckRule(_capture_mismatch, _capture_mismatch_gate),
    "model_call_failed": CheckRule(_model_call_failed, _matched_nonempty),
    "rollout_token_count_mismatch": CheckRule(_token_count_mismatch, _token_comparison_gate),
    "model_call_runaway_generation": CheckRule(_runaway_generation, _runaway_gate),
}
"""Rule per rollout check ID, covering exactly ``registry.ROLLOUT_CHECK_IDS``."""
