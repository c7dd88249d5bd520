"""Function, custom-tool, reasoning and MCP items: what tool-using agents put in a conversation."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ._base import DROP_EXTRAS, ItemStatus, OpenModel
from ._parts import FunctionOutputPart, ToolOutputPart

__all__ = [
    "CustomToolCall",
    "CustomToolCallOutput",
    "FunctionCall",
    "FunctionCallOutput",
    "McpApprovalRequest",
    "McpApprovalResponse",
    "McpCall",
    "McpListTools",
    "Reasoning",
]


class FunctionCall(OpenModel):
    model_config = DROP_EXTRAS

    arguments: str
    call_id: str
    name: str
    type: Literal["function_call"] = "function_call"
    id: str | None = None
    status: ItemStatus | None = None
    namespace: str | None = None


class FunctionCallOutput(OpenModel):
    model_config = DROP_EXTRAS

    call_id: str
    output: str | list[FunctionOutputPart]
    type: Literal["function_call_output"] = "function_call_output"
    id: str | None = None
    status: ItemStatus | None = None


class SummaryText(OpenModel):
    text: str
    type: Literal["summary_text"]


class ReasoningText(OpenModel):
    text: str
    type: Literal["reasoning_text"]


class Reasoning(OpenModel):
    model_config = DROP_EXTRAS

    id: str
    summary: list[SummaryText]
    type: Literal["reasoning"] = "reasoning"
    encrypted_content: str | None = None
    content: list[ReasoningText] | None = None


class CallerDirect(OpenModel):
    type: Literal["direct"]


class CallerProgram(OpenModel):
    caller_id: str
    type: Literal["program"]


Caller = CallerDirect | CallerProgram


class CustomToolCall(OpenModel):
    call_id: str
    input: str
    name: str
    type: Literal["custom_tool_call"] = "custom_tool_call"
    id: str | None = None
    async_: bool | None = Field(default=None, alias="async")
    caller: Caller | None = None
    namespace: str | None = None


class CustomToolCallOutput(OpenModel):
    call_id: str
    output: str | list[ToolOutputPart]
    type: Literal["custom_tool_call_output"] = "custom_tool_call_output"
    id: str | None = None
    caller: Caller | None = None


class McpHttpError(OpenModel):
    code: int
    message: str
    type: Literal["http_error"]


class McpProtocolError(OpenModel):
    code: int
    message: str
    type: Literal["mcp_protocol_error"]


class McpToolExecutionError(OpenModel):
    content: Any
    type: Literal["mcp_tool_execution_error"]


class McpCall(OpenModel):
    id: str | None = None
    arguments: str
    name: str
    server_label: str | None = None
    type: Literal["mcp_call"] = "mcp_call"
    approval_request_id: str | None = None
    error: McpHttpError | McpProtocolError | McpToolExecutionError | None = None
    output: str | None = None
    status: str | None = None


class McpListTools(OpenModel):
    """Every field is optional, so this is also where untyped items of no known shape land."""

    id: str | None = None
    server_label: str | None = None
    tools: list[Any] = Field(default_factory=list)
    type: Literal["mcp_list_tools"] = "mcp_list_tools"
    error: str | None = None


class McpApprovalRequest(OpenModel):
    id: str | None = None
    arguments: str
    name: str
    server_label: str | None = None
    type: Literal["mcp_approval_request"] = "mcp_approval_request"


class McpApprovalResponse(OpenModel):
    approval_request_id: str
    approve: bool
    type: Literal["mcp_approval_response"] = "mcp_approval_response"
    id: str | None = None
    reason: str | None = None
