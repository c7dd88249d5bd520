"""Items of the hosted / built-in tools: search, computer use, image generation, shells, patches."""

from __future__ import annotations

from typing import Any, Literal

from ._base import ItemStatus, OpenModel
from ._tool_items import Caller

__all__ = [
    "ApplyPatchCall",
    "ApplyPatchCallOutput",
    "CodeInterpreterCall",
    "Compaction",
    "ComputerCall",
    "ComputerCallOutput",
    "FileSearchCall",
    "ImageGenerationCall",
    "LocalShellCall",
    "LocalShellCallOutput",
    "ShellCall",
    "ShellCallOutput",
    "WebSearchCall",
]


class FileSearchResult(OpenModel):
    attributes: dict[str, str | float | bool] | None = None
    file_id: str | None = None
    filename: str | None = None
    score: float | None = None
    text: str | None = None


class FileSearchCall(OpenModel):
    id: str
    queries: list[str]
    status: Literal["in_progress", "searching", "completed", "incomplete", "failed"]
    type: Literal["file_search_call"] = "file_search_call"
    results: list[FileSearchResult] | None = None


class SearchSource(OpenModel):
    type: Literal["url"]
    url: str


class ActionSearch(OpenModel):
    type: Literal["search"]
    query: str | None = None
    queries: list[str] | None = None
    sources: list[SearchSource] | None = None


class ActionOpenPage(OpenModel):
    type: Literal["open_page"]
    url: str | None = None


class ActionFind(OpenModel):
    pattern: str
    type: Literal["find_in_page"]
    url: str


class WebSearchCall(OpenModel):
    id: str
    action: ActionSearch | ActionOpenPage | ActionFind
    status: Literal["in_progress", "searching", "completed", "failed", "incomplete"]
    type: Literal["web_search_call"] = "web_search_call"


class Click(OpenModel):
    button: Literal["left", "right", "wheel", "back", "forward"]
    type: Literal["click"]
    x: int
    y: int
    keys: list[str] | None = None


class DoubleClick(OpenModel):
    type: Literal["double_click"]
    x: int
    y: int
    keys: list[str] | None = None


class DragPoint(OpenModel):
    x: int
    y: int


class Drag(OpenModel):
    path: list[DragPoint]
    type: Literal["drag"]
    keys: list[str] | None = None


class Keypress(OpenModel):
    keys: list[str]
    type: Literal["keypress"]


class Move(OpenModel):
    type: Literal["move"]
    x: int
    y: int
    keys: list[str] | None = None


class Screenshot(OpenModel):
    type: Literal["screenshot"]


class Scroll(OpenModel):
    scroll_x: int
    scroll_y: int
    type: Literal["scroll"]
    x: int
    y: int
    keys: list[str] | None = None


class TypeText(OpenModel):
    text: str
    type: Literal["type"]


class Wait(OpenModel):
    type: Literal["wait"]


ComputerAction = Click | DoubleClick | Drag | Keypress | Move | Screenshot | Scroll | TypeText | Wait


class SafetyCheck(OpenModel):
    id: str
    code: str | None = None
    message: str | None = None


class ComputerCall(OpenModel):
    id: str
    call_id: str
    pending_safety_checks: list[SafetyCheck]
    status: ItemStatus
    type: Literal["computer_call"] = "computer_call"
    action: ComputerAction | None = None
    actions: list[ComputerAction] | None = None


class ComputerScreenshot(OpenModel):
    type: Literal["computer_screenshot"]
    file_id: str | None = None
    image_url: str | None = None


class ComputerCallOutput(OpenModel):
    call_id: str
    output: ComputerScreenshot
    type: Literal["computer_call_output"] = "computer_call_output"
    id: str | None = None
    acknowledged_safety_checks: list[SafetyCheck] | None = None
    status: ItemStatus | None = None


class ModerationDetails(OpenModel):
    categories: list[Any]
    moderation_stage: Literal["input", "output", "unknown"]


class ImageGenerationError(OpenModel):
    code: str | None = None
    message: str
    param: str | None = None
    type: str
    moderation_details: ModerationDetails | None = None


class SvgUsage(OpenModel):
    input_tokens: int
    model: str
    output_tokens: int
    reasoning_tokens: int
    total_tokens: int


class ImageGenerationCall(OpenModel):
    id: str
    result: str | None = None
    status: Literal["in_progress", "completed", "generating", "failed"]
    type: Literal["image_generation_call"] = "image_generation_call"
    action: Literal["generate", "edit", "auto"] | None = None
    background: Literal["transparent", "opaque", "auto"] | None = None
    error: ImageGenerationError | None = None
    output_format: Literal["png", "webp", "jpeg", "gif", "svg"] | None = None
    quality: Literal["low", "medium", "high", "xhigh", "max", "auto"] | None = None
    revised_prompt: str | None = None
    size: str | None = None
    svg_usage: SvgUsage | None = None


class OutputLogs(OpenModel):
    logs: str
    type: Literal["logs"]


class OutputImage(OpenModel):
    type: Literal["image"]
    url: str


class CodeInterpreterCall(OpenModel):
    id: str
    code: str | None = None
    container_id: str
    outputs: list[OutputLogs | OutputImage] | None = None
    status: Literal["in_progress", "completed", "incomplete", "interpreting", "failed"]
    type: Literal["code_interpreter_call"] = "code_interpreter_call"


class LocalShellAction(OpenModel):
    command: list[str]
    env: dict[str, str]
    type: Literal["exec"]
    timeout_ms: int | None = None
    user: str | None = None
    working_directory: str | None = None


class LocalShellCall(OpenModel):
    id: str
    action: LocalShellAction
    call_id: str
    status: ItemStatus
    type: Literal["local_shell_call"] = "local_shell_call"


class LocalShellCallOutput(OpenModel):
    id: str
    output: str
    type: Literal["local_shell_call_output"] = "local_shell_call_output"
    status: ItemStatus | None = None


class CreateFile(OpenModel):
    diff: str
    path: str
    type: Literal["create_file"]


class DeleteFile(OpenModel):
    path: str
    type: Literal["delete_file"]


class UpdateFile(OpenModel):
    diff: str
    path: str
    type: Literal["update_file"]


class ApplyPatchCall(OpenModel):
    id: str
    call_id: str
    operation: CreateFile | DeleteFile | UpdateFile
    status: Literal["in_progress", "completed"]
    type: Literal["apply_patch_call"] = "apply_patch_call"
    caller: Caller | None = None
    created_by: str | None = None


class ApplyPatchCallOutput(OpenModel):
    id: str
    call_id: str
    status: Literal["completed", "failed"]
    type: Literal["apply_patch_call_output"] = "apply_patch_call_output"
    caller: Caller | None = None
    created_by: str | None = None
    output: str | None = None


class Compaction(OpenModel):
    id: str
    encrypted_content: str
    type: Literal["compaction"] = "compaction"
    created_by: str | None = None


class ShellAction(OpenModel):
    commands: list[str]
    max_output_length: int | None = None
    timeout_ms: int | None = None


class LocalEnvironment(OpenModel):
    type: Literal["local"]


class ContainerReference(OpenModel):
    container_id: str
    type: Literal["container_reference"]


class ShellCall(OpenModel):
    id: str
    action: ShellAction
    call_id: str
    environment: LocalEnvironment | ContainerReference | None = None
    status: ItemStatus
    type: Literal["shell_call"] = "shell_call"
    caller: Caller | None = None
    created_by: str | None = None


class OutcomeTimeout(OpenModel):
    type: Literal["timeout"]


class OutcomeExit(OpenModel):
    exit_code: int
    type: Literal["exit"]


class ShellOutput(OpenModel):
    outcome: OutcomeTimeout | OutcomeExit
    stderr: str
    stdout: str
    created_by: str | None = None


class ShellCallOutput(OpenModel):
    id: str
    call_id: str
    max_output_length: int | None = None
    output: list[ShellOutput]
    status: ItemStatus
    type: Literal["shell_call_output"] = "shell_call_output"
    caller: Caller | None = None
    created_by: str | None = None
