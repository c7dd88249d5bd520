"""What the health checks read of a validated trajectory, as structural types: both validators
(the pydantic contract and the strict structs) feed the same evidence and checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

__all__ = [
    "CallRefView",
    "GapView",
    "ModelCallView",
    "OwnerView",
    "ResponseMetadataView",
    "ServerRefView",
    "TokenStatsView",
    "TrajectoryView",
    "TurnView",
]


class ServerRefView(Protocol):
    @property
    def type(self) -> str: ...
    @property
    def name(self) -> str: ...


class CallRefView(Protocol):
    @property
    def model_call_id(self) -> str | None: ...
    @property
    def model_ref(self) -> ServerRefView | None: ...
    @property
    def response_id(self) -> str | None: ...


class OwnerView(Protocol):
    """A turn or an invocation: something that references captured model calls."""

    @property
    def model_calls(self) -> Sequence[CallRefView]: ...


class TurnView(OwnerView, Protocol):
    @property
    def turn_no(self) -> int: ...
    @property
    def answer(self) -> Any: ...
    @property
    def reasoning_content(self) -> Any: ...


class ResponseMetadataView(Protocol):
    @property
    def response_id(self) -> str | None: ...
    @property
    def model_ref(self) -> ServerRefView | None: ...
    @property
    def status_code(self) -> int | None: ...
    @property
    def response_status(self) -> str | None: ...
    @property
    def finish_reason(self) -> str | None: ...
    @property
    def error_category(self) -> str | None: ...


class TokenStatsView(Protocol):
    @property
    def prompt_tokens(self) -> int | None: ...
    @property
    def completion_tokens(self) -> int | None: ...


class ModelCallView(Protocol):
    @property
    def model_call_id(self) -> str | None: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def response(self) -> Any: ...
    @property
    def response_metadata(self) -> ResponseMetadataView: ...
    @property
    def token_stats(self) -> TokenStatsView: ...


class GapView(Protocol):
    @property
    def code(self) -> str: ...
    @property
    def invocation_id(self) -> str | None: ...
    @property
    def detail(self) -> str | None: ...


class TrajectoryView(Protocol):
    @property
    def invocations(self) -> Sequence[OwnerView]: ...
    @property
    def turns(self) -> Sequence[TurnView]: ...
    @property
    def model_calls(self) -> Sequence[ModelCallView]: ...
    @property
    def gaps(self) -> Sequence[GapView]: ...
