"""Tool definitions, as listed by ``tool_search_output`` and ``additional_tools`` items."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ._base import OpenModel

__all__ = ["Tool"]

Callers = list[Literal["direct", "programmatic"]] | None
MemoryLimit = Literal["1g", "4g", "16g", "64g"]


class FunctionTool(OpenModel):
    name: str
    parameters: dict[str, Any] | None = None
    strict: bool | None = None
    type: Literal["function"]
    allowed_callers: Callers = None
    async_: bool | None = Field(default=None, alias="async")
    defer_loading: bool | None = None
    description: str | None = None
    output_schema: dict[str, Any] | None = None


class NamespacedFunction(OpenModel):
    name: str
    type: Literal["function"]
    allowed_callers: Callers = None
    async_: bool | None = Field(default=None, alias="async")
    defer_loading: bool | None = None
    description: str | None = None
    output_schema: dict[str, Any] | None = None
    parameters: Any = None
    strict: bool | None = None


class ComparisonFilter(OpenModel):
    key: str
    type: Literal["eq", "ne", "gt", "gte", "lt", "lte", "in", "nin"]
    value: str | float | bool | list[str | float]


class CompoundFilter(OpenModel):
    filters: list[Any]
    type: Literal["and", "or"]


class HybridSearch(OpenModel):
    pass


class RankingOptions(OpenModel):
    hybrid_search: HybridSearch | None = None
    ranker: Literal["auto", "default-2024-11-15"] | None = None
    score_threshold: float | None = None


class FileSearchTool(OpenModel):
    type: Literal["file_search"]
    vector_store_ids: list[str]
    filters: ComparisonFilter | CompoundFilter | None = None
    max_num_results: int | None = None
    ranking_options: RankingOptions | None = None


class ComputerTool(OpenModel):
    type: Literal["computer"]


class ComputerUsePreviewTool(OpenModel):
    display_height: int
    display_width: int
    environment: Literal["windows", "mac", "linux", "ubuntu", "browser"]
    type: Literal["computer_use_preview"]


class DomainFilters(OpenModel):
    allowed_domains: list[str] | None = None


class ApproximateLocation(OpenModel):
    city: str | None = None
    country: str | None = None
    region: str | None = None
    timezone: str | None = None
    type: Literal["approximate"] | None = None


class RequiredLocation(OpenModel):
    type: Literal["approximate"]
    city: str | None = None
    country: str | None = None
    region: str | None = None
    timezone: str | None = None


ContextSize = Literal["low", "medium", "high"] | None


class WebSearchTool(OpenModel):
    type: Literal["web_search", "web_search_2025_08_26"]
    external_web_access: bool | None = None
    filters: DomainFilters | None = None
    search_context_size: ContextSize = None
    user_location: ApproximateLocation | None = None


class McpToolFilter(OpenModel):
    read_only: bool | None = None
    tool_names: list[str] | None = None


class McpApprovalFilter(OpenModel):
    always: McpToolFilter | None = None
    never: McpToolFilter | None = None


class McpTool(OpenModel):
    server_label: str
    type: Literal["mcp"]
    allowed_callers: Callers = None
    allowed_tools: list[str] | McpToolFilter | None = None
    authorization: str | None = None
    connector_id: (
        Literal[
            "connector_dropbox",
            "connector_gmail",
            "connector_googlecalendar",
            "connector_googledrive",
            "connector_microsoftteams",
            "connector_outlookcalendar",
            "connector_outlookemail",
            "connector_sharepoint",
        ]
        | None
    ) = None
    defer_loading: bool | None = None
    headers: dict[str, str] | None = None
    require_approval: McpApprovalFilter | Literal["always", "never"] | None = None
    server_description: str | None = None
    server_url: str | None = None
    tunnel_id: str | None = None


class NetworkPolicyDisabled(OpenModel):
    type: Literal["disabled"]


class NetworkPolicyAllowlist(OpenModel):
    allowed_domains: list[str]
    type: Literal["allowlist"]
    domain_secrets: list[Any] | None = None


NetworkPolicy = NetworkPolicyDisabled | NetworkPolicyAllowlist | None


class AutoContainer(OpenModel):
    type: Literal["auto"]
    file_ids: list[str] | None = None
    memory_limit: MemoryLimit | None = None
    network_policy: NetworkPolicy = None


class CodeInterpreterTool(OpenModel):
    container: str | AutoContainer
    type: Literal["code_interpreter"]
    allowed_callers: Callers = None


class ProgrammaticToolCalling(OpenModel):
    type: Literal["programmatic_tool_calling"]


class ImageMask(OpenModel):
    file_id: str | None = None
    image_url: str | None = None


class SvgReasoning(OpenModel):
    effort: Any = None


class SvgOptions(OpenModel):
    model: str | None = None
    reasoning: SvgReasoning | None = None


class ImageGenerationTool(OpenModel):
    type: Literal["image_generation"]
    action: Literal["generate", "edit", "auto"] | None = None
    background: Literal["transparent", "opaque", "auto"] | None = None
    complexity: Literal["low", "medium", "high"] | None = None
    frame_count: int | None = None
    frame_duration_ms: int | None = None
    input_fidelity: Literal["high", "low"] | None = None
    input_image_mask: ImageMask | None = None
    model: str | None = None
    moderation: Literal["auto", "low"] | None = None
    output_compression: int | None = None
    output_format: Literal["png", "webp", "jpeg", "gif", "svg"] | None = None
    partial_images: int | None = None
    quality: Literal["low", "medium", "high", "xhigh", "max", "auto"] | None = None
    size: Literal["1024x1024", "1024x1536", "1536x1024", "auto"] | str | None = None
    svg: SvgOptions | None = None


class LocalShellTool(OpenModel):
    type: Literal["local_shell"]


class ShellContainerAuto(OpenModel):
    type: Literal["container_auto"]
    file_ids: list[str] | None = None
    memory_limit: MemoryLimit | None = None
    network_policy: NetworkPolicy = None
    skills: list[Any] | None = None


class ShellLocal(OpenModel):
    type: Literal["local"]
    skills: list[Any] | None = None


class ShellContainerReference(OpenModel):
    container_id: str
    type: Literal["container_reference"]


class ShellTool(OpenModel):
    type: Literal["shell"]
    allowed_callers: Callers = None
    environment: ShellContainerAuto | ShellLocal | ShellContainerReference | None = None


class TextFormat(OpenModel):
    type: Literal["text"]


class GrammarFormat(OpenModel):
    definition: str
    syntax: Literal["lark", "regex"]
    type: Literal["grammar"]


class CustomTool(OpenModel):
    name: str
    type: Literal["custom"]
    allowed_callers: Callers = None
    async_: bool | None = Field(default=None, alias="async")
    defer_loading: bool | None = None
    description: str | None = None
    format: TextFormat | GrammarFormat | None = None


class NamespaceTool(OpenModel):
    description: str
    name: str
    tools: list[CustomTool | NamespacedFunction]
    type: Literal["namespace"]


class ToolSearchTool(OpenModel):
    type: Literal["tool_search"]
    description: str | None = None
    execution: Literal["server", "client"] | None = None
    parameters: Any = None


class WebSearchPreviewTool(OpenModel):
    type: Literal["web_search_preview", "web_search_preview_2025_03_11"]
    search_content_types: list[Literal["text", "image"]] | None = None
    search_context_size: ContextSize = None
    user_location: RequiredLocation | None = None


class ApplyPatchTool(OpenModel):
    type: Literal["apply_patch"]
    allowed_callers: Callers = None


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
