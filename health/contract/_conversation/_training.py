"""``…__training`` variants: items that carry the generation's token ids and log-probs."""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from ._base import OpenModel
from ._messages import EasyInputMessage, InputMessage, OutputMessage
from ._tool_items import FunctionCall, Reasoning

__all__ = ["TOKEN_KEYS", "TRAINING_MODELS", "token_metadata_problem"]

TOKEN_KEYS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")
_ANY_TOKEN_KEY = (*TOKEN_KEYS, "routed_experts")

RoutedExperts = list[list[list[int]]] | str | None


class _TokenFields(TypedDict):
    prompt_token_ids: list[int]
    generation_token_ids: list[int]
    generation_log_probs: list[float]


_TOKENS = TypeAdapter(_TokenFields)
_EXPERTS: TypeAdapter[RoutedExperts] = TypeAdapter(RoutedExperts)


def token_metadata_problem(value: dict[str, Any]) -> str | None:
    """Why the item's token metadata is invalid, or ``None``. Checked on every item, before routing:
    it is all-or-nothing (``routed_experts`` alone counts as partial) and type-checked."""
    if not any(key in value for key in _ANY_TOKEN_KEY):
        return None
    missing = [key for key in TOKEN_KEYS if key not in value]
    if missing:
        return f"token metadata must include all required fields; missing: {', '.join(sorted(missing))}"
    try:
        _TOKENS.validate_python({key: value[key] for key in TOKEN_KEYS})
        if "routed_experts" in value:
            _EXPERTS.validate_python(value["routed_experts"])
    except ValidationError as exc:
        return f"invalid token metadata at {exc.errors()[0]['loc']}"
    return None


class _TokenMetadata(OpenModel):
    prompt_token_ids: list[int]
    generation_token_ids: list[int]
    generation_log_probs: list[float]
    routed_experts: RoutedExperts = None


class EasyInputMessageForTraining(_TokenMetadata, EasyInputMessage):
    pass


class InputMessageForTraining(_TokenMetadata, InputMessage):
    pass


class OutputMessageForTraining(_TokenMetadata, OutputMessage):
    pass


class FunctionCallForTraining(_TokenMetadata, FunctionCall):
    pass


class ReasoningForTraining(_TokenMetadata, Reasoning):
    pass


TRAINING_MODELS: dict[str, type[OpenModel]] = {
    "easy_message": EasyInputMessageForTraining,
    "input_message": InputMessageForTraining,
    "output_message": OutputMessageForTraining,
    "function_call": FunctionCallForTraining,
    "reasoning": ReasoningForTraining,
}
