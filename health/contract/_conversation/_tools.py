"""Tool definitions (as listed by ``tool_search_output`` / ``additional_tools``) and those items."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ._base import ItemStatus, OpenModel

__all__ = ["AdditionalTools", "CompactionTrigger", "Tool", "ToolSearchCall", "ToolSearchOutput"]


class FunctionTool(OpenModel):
    name: str
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    type: Literal["function"]
    allowed_callers: list[Any] | None = None
    async_: bool | None = Field(default=None, alias="async")
    defer_loading: bool | None = None
    description: str | None = None
    output_schema: dict[str, Any] | None = None


class FileSearchTool(OpenModel):
    type: Literal["file_search"]
    vector_store_ids: list[str]
    filters: Any = None
    max_num_results: int | None = None
    ranking_options: Any = None


class ComputerTool(OpenModel):
    type: Literal["computer"]


class ComputerUsePreviewTool(OpenModel):
    display_height: int
    display_width: int
    environment: Literal["windows", "mac", "linux", "ubuntu", "browser"]
    type: Literal["computer_use_preview"]


class WebSearchTool(OpenModel):
    type: Literal["web_search", "web_search_2025_08_26"]
    external_web_access: bool | None = None
    filters: Any = None
    search_context_size: Literal["low", "medium", "high"] | None = None
    user_location: Any = None


class McpTool(OpenModel):
    server_label: str
    type: Literal["mcp"]
    allowed_callers: list[Any] | None = None
    allowed_tools: Any = None
    authorization: str | None = None
    connector_id: str | None = None
    defer_loading: bool | None = None
    headers: dict[str, str] | None = None
    require_approval: Any = None
    server_description: str | None = None
    server_url: str | None = None
    tunnel_id: str | None = None


class CodeInterpreterTool(OpenModel):
    container: Any
    type: Literal["code_interpreter"]
    allowed_callers: list[Any] | None = None


class ProgrammaticToolCalling(OpenModel):
    type: Literal["programmatic_tool_calling"]


class ImageGenerationTool(OpenModel):
    type: Literal["image_generation"]
    action: Any = None
    background: Any = None
    complexity: Any = None
    frame_count: Any = None
    frame_duration_ms: Any = None
    input_fidelity: Any = None
    input_image_mask: Any = None
    model: Any = None
    moderation: Any = None
    output_compression: Any = None
    output_format: Any = None
    partial_images: Any = None
    quality: Any = None
    size: Any = None
    svg: Any = None


class LocalShellTool(OpenModel):
    type: Literal["local_shell"]


class ShellTool(OpenModel):
    type: Literal["shell"]
    allowed_callers: list[Any] | None = None
    environment: Any = None


class CustomTool(OpenModel):
    name: str
    type: Literal["custom"]
    allowed_callers: list[Any] | None = None
    async_: bool | None = Field(default=None, alias="async")
    defer_loading: bool | None = None
    description: str | None = None
    format: Any = None


class NamespaceTool(OpenModel):
    description: str
    name: str
    tools: list[Any]
    type: Literal["namespace"]


class ToolSearchTool(OpenModel):
    type: Literal["tool_search"]
    description: str | None = None
    execution: Literal["server", "client"] | None = None
    parameters: Any = None


class WebSearchPreviewTool(OpenModel):
    type: Literal["web_search_preview", "web_search_preview_2025_03_11"]
    search_content_types: list[Any] | None = None
    search_context_size: Literal["low", "medium", "high"] | None = None
    user_location: Any = None


class ApplyPatchTool(OpenModel):
    type: Literal["apply_patch"]
    allowed_callers: list[Any] | None = None


Tool = (
    FunctionTool
    | FileSearchTool
    | ComputerTool
    | ComputerUsePreviewTool
    | WebSearchTool
    | McpTool
    | CodeInterpreterTool
    | ProgrammaticToolCalling
    | ImageGenerationTool
    | LocalShellTool
    | ShellTool
    | CustomTool
    | NamespaceTool
    | ToolSearchTool
    | WebSearchPreviewTool
    | ApplyPatchTool
)


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
