"""The items that carry tool definitions or tool search: ``tool_search_*``, ``additional_tools``, and
``compaction_trigger``."""

from __future__ import annotations

from typing import Any, Literal

from ._base import ItemStatus, OpenModel
from ._tool_defs import Tool

__all__ = ["AdditionalTools", "CompactionTrigger", "ToolSearchCall", "ToolSearchOutput"]


class ToolSearchCall(OpenModel):
    id: str
    arguments: Any
    call_id: str | None = None
    execution: Literal["server", "client"]
    status: ItemStatus
    type: Literal["tool_search_call"] = "tool_search_call"
    created_by: str | None = None


class ToolSearchOutput(OpenModel):
    id: str
    call_id: str | None = None
    execution: Literal["server", "client"]
    status: ItemStatus
    tools: list[Tool]
    type: Literal["tool_search_output"] = "tool_search_output"
    created_by: str | None = None


class CompactionTrigger(OpenModel):
    type: Literal["compaction_trigger"] = "compaction_trigger"
    id: str | None = None


class AdditionalTools(OpenModel):
    role: Literal["developer"]
    tools: list[Tool]
    type: Literal["additional_tools"] = "additional_tools"
    id: str | None = None
