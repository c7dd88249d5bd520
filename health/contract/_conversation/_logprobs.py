"""Log-prob sequences of output text, whose items the reference checks only when it dumps them.

The reference's verdict and canonical form then depend on pydantic-core's serializer fallbacks,
so a message with non-plain log-probs is validated and dumped once through a replica of the
reference's structure: a failing replica rejects the item (same ``ValidationError`` name).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, Literal, Union

from pydantic import Discriminator, Tag, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from ._base import DEFERRED, DROP_EXTRAS, ItemStatus, OpenModel
from ._parts import Annotation, OutputRefusal

__all__ = ["settle_logprobs"]


class _LazyTopLogprob(TypedDict):
    token: str
    bytes: Iterable[int]
    logprob: float


class _LazyLogprob(TypedDict):
    token: str
    bytes: Iterable[int]
    logprob: float
    top_logprobs: Iterable[_LazyTopLogprob]


class _LazyOutputText(OpenModel):
    model_config = DROP_EXTRAS

    annotations: list[Annotation]
    text: str
    type: Literal["output_text"] = "output_text"
    logprobs: list[_LazyLogprob] | None = None


class _LazyOutputMessage(OpenModel):
    model_config = DROP_EXTRAS

    id: str
    content: list[_LazyOutputText | OutputRefusal]
    role: Literal["assistant"] = "assistant"
    status: ItemStatus = "completed"
    type: Literal["message"] = "message"
    phase: Literal["commentary", "final_answer"] | None = None


class _Unused(OpenModel):
    type: Literal["-"]


def _tag(value: Any) -> str:
    return "message"


_REPLICA: TypeAdapter[list[Any]] = TypeAdapter(
    list[
        Annotated[
            Union[Annotated[_LazyOutputMessage, Tag("message")], Annotated[_Unused, Tag("-")]],  # noqa: UP007
            Discriminator(_tag),
        ]
    ],
    config=DEFERRED,
)


def _int_list(value: Any) -> bool:
    return type(value) is list and all(type(item) is int for item in value)


def _plain(entry: Any) -> bool:
    """Concrete, valid sequences: the dump reproduces them unchanged, no replica needed."""
    if type(entry) is not dict or not _int_list(entry.get("bytes")):
        return False
    top = entry.get("top_logprobs")
    return type(top) is list and all(
        type(alternative) is dict
        and len(alternative) == 3
        and type(alternative.get("token")) is str
        and _int_list(alternative.get("bytes"))
        and type(alternative.get("logprob")) is float
        for alternative in top
    )


def _has_lazy_logprobs(part: Any) -> bool:
    if type(part) is not dict:
        return False
    logprobs = part.get("logprobs")
    return type(logprobs) is list and not all(_plain(entry) for entry in logprobs)


def settle_logprobs(message: Any) -> Any:
    """Before-validator of output messages: settle lazily checked log-prob sequences (module doc)."""
    if type(message) is not dict:
        return message
    content = message.get("content")
    if type(content) is not list or not any(_has_lazy_logprobs(part) for part in content):
        return message
    try:
        replica = _REPLICA.validate_python([message])
    except ValidationError:
        return message  # invalid for another reason: the real validation reports it
    try:
        (dumped,) = _REPLICA.dump_python(replica, mode="json", warnings=False)
    except ValidationError:
        raise ValueError("log-prob sequences hold items that fail the canonical dump") from None
    parts = [
        {**part, "logprobs": settled["logprobs"]} if _has_lazy_logprobs(part) else part
        for part, settled in zip(content, dumped["content"], strict=True)
    ]
    return {**message, "content": parts}
