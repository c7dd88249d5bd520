"""The three ``message`` shapes: easy input message, input message and output message."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from ._base import DROP_EXTRAS, ItemStatus, OpenModel
from ._logprobs import settle_logprobs
from ._parts import InputPart, OutputPart

__all__ = ["EasyInputMessage", "InputMessage", "OutputMessage", "Phase"]

Phase = Literal["commentary", "final_answer"]


class EasyInputMessage(OpenModel):
    """``{"role", "content"}`` with string or input-part content; the most common item."""

    model_config = DROP_EXTRAS

    content: str | list[InputPart]
    role: Literal["user", "assistant", "system", "developer"]
    type: Literal["message"] = "message"
    phase: Phase | None = None


class InputMessage(OpenModel):
    """An input message with part-list content and an explicit status."""

    model_config = DROP_EXTRAS

    content: list[InputPart]
    role: Literal["user", "system", "developer"]
    status: ItemStatus | None = None
    type: Literal["message"] = "message"


class OutputMessage(OpenModel):
    """A model's output message: ``output_text`` / ``refusal`` parts and an id."""

    model_config = DROP_EXTRAS

    id: str
    content: list[OutputPart]

    _settle = model_validator(mode="before")(settle_logprobs)
    role: Literal["assistant"] = "assistant"
    status: ItemStatus = "completed"
    type: Literal["message"] = "message"
    phase: Phase | None = None
