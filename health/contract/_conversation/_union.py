"""The conversation item union: a tagged union routed by :func:`item_tag`, behind the token check."""

from __future__ import annotations

from typing import Annotated, Any, NamedTuple, Union

from pydantic import Discriminator, Tag, TypeAdapter, ValidatorFunctionWrapHandler, WrapValidator

from ._base import DEFERRED, OpenModel
from ._builtin_items import (
    ApplyPatchCall,
    ApplyPatchCallOutput,
    CodeInterpreterCall,
    Compaction,
    ComputerCall,
    ComputerCallOutput,
    FileSearchCall,
    ImageGenerationCall,
    LocalShellCall,
    LocalShellCallOutput,
    ShellCall,
    ShellCallOutput,
    WebSearchCall,
)
from ._messages import EasyInputMessage, InputMessage, OutputMessage
from ._routing import item_tag
from ._tool_items import (
    CustomToolCall,
    CustomToolCallOutput,
    FunctionCall,
    FunctionCallOutput,
    McpApprovalRequest,
    McpApprovalResponse,
    McpCall,
    McpListTools,
    Reasoning,
)
from ._tools import AdditionalTools, CompactionTrigger, ToolSearchCall, ToolSearchOutput
from ._training import TRAINING_MODELS

__all__ = ["ITEM_MODELS", "Conversation", "ItemModel", "RoutedItems"]

ITEM_MODELS: dict[str, type[OpenModel]] = {
    "easy_message": EasyInputMessage,
    "input_message": InputMessage,
    "output_message": OutputMessage,
    "function_call": FunctionCall,
    "function_call_output": FunctionCallOutput,
    "reasoning": Reasoning,
    "mcp_call": McpCall,
    "mcp_list_tools": McpListTools,
    "mcp_approval_request": McpApprovalRequest,
    "file_search_call": FileSearchCall,
    "web_search_call": WebSearchCall,
    "computer_call": ComputerCall,
    "image_generation_call": ImageGenerationCall,
    "code_interpreter_call": CodeInterpreterCall,
    "local_shell_call": LocalShellCall,
    "custom_tool_call": CustomToolCall,
    "computer_call_output": ComputerCallOutput,
    "custom_tool_call_output": CustomToolCallOutput,
    "local_shell_call_output": LocalShellCallOutput,
    "mcp_approval_response": McpApprovalResponse,
    "apply_patch_call": ApplyPatchCall,
    "apply_patch_call_output": ApplyPatchCallOutput,
    "compaction": Compaction,
    "shell_call": ShellCall,
    "shell_call_output": ShellCallOutput,
    "tool_search_call": ToolSearchCall,
    "tool_search_output": ToolSearchOutput,
    "compaction_trigger": CompactionTrigger,
    "additional_tools": AdditionalTools,
    **{f"{tag}__training": model for tag, model in TRAINING_MODELS.items()},
}

for _tag, _model in ITEM_MODELS.items():
    _model.item_tag = _tag

_members = tuple(Annotated[model, Tag(tag)] for tag, model in ITEM_MODELS.items())

ItemModel = Annotated[Union[_members], Discriminator(item_tag)]  # type: ignore[valid-type]  # noqa: UP007
"""The full item union: every tag, routed by :func:`item_tag` so each item meets exactly one model."""

_ITEMS: TypeAdapter[list[Any]] = TypeAdapter(list[ItemModel], config=DEFERRED)


def _validate_conversation(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """One pydantic call per conversation, whatever the items."""
    return _ITEMS.validate_python(value)


class RoutedItems(NamedTuple):
    """Metadata of :data:`Conversation` for the derived structs (``health.contract.strict``):
    the items' models by tag (routed by :func:`item_tag`) and the adapter validating a list."""

    models: dict[str, type[OpenModel]]
    items: TypeAdapter[list[Any]]


Conversation = Annotated[list[Any], WrapValidator(_validate_conversation), RoutedItems(ITEM_MODELS, _ITEMS)]
"""``AgentInvocation.conversation``: every item validated into the model of its tag."""
