"""Content parts: message input parts, output-message parts and tool-output parts."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Required

from pydantic import BeforeValidator
from typing_extensions import TypedDict

from ._base import DROP_EXTRAS, OpenModel, StrictForm

__all__ = [
    "FunctionOutputPart",
    "InputPart",
    "OutputPart",
    "ToolOutputPart",
    "check_input_video_part",
]

ImageDetail = Literal["low", "high", "auto", "original"]
FileDetail = Literal["auto", "low", "high"]


class CacheBreakpointParam(TypedDict, total=False):
    mode: Required[Literal["explicit"]]


class CacheBreakpoint(OpenModel):
    mode: Literal["explicit"]


# -- message input parts (request params) -------------------------------------------------------


class InputTextParam(TypedDict, total=False):
    text: Required[str]
    type: Required[Literal["input_text"]]
    prompt_cache_breakpoint: CacheBreakpointParam


class InputImageParam(TypedDict, total=False):
    detail: Required[ImageDetail]
    type: Required[Literal["input_image"]]
    file_id: str | None
    image_url: str | None
    prompt_cache_breakpoint: CacheBreakpointParam


class InputFileParam(TypedDict, total=False):
    type: Required[Literal["input_file"]]
    detail: FileDetail
    file_data: str
    file_id: str | None
    file_url: str
    filename: str
    prompt_cache_breakpoint: CacheBreakpointParam


class InputVideoPart(TypedDict, total=False):
    type: Required[Literal["input_video"]]
    video_url: str
    video: str


def check_input_video_part(value: Any) -> Any:
    """An ``input_video`` part names exactly one non-blank URL, under ``video_url`` or ``video``."""
    if isinstance(value, dict) and value.get("type") == "input_video":
        present = [key for key in ("video_url", "video") if key in value]
        if len(present) != 1:
            raise ValueError("input_video requires exactly one of video_url or video")
        url = value[present[0]]
        if not isinstance(url, str) or not url.strip():
            raise ValueError(f"input_video.{present[0]} must contain a non-empty URL")
    return value


InputPart = Annotated[
    InputTextParam | InputImageParam | InputFileParam | InputVideoPart,
    BeforeValidator(check_input_video_part),
    StrictForm(InputTextParam | InputImageParam | InputFileParam),  # the check passes these unchanged
]

# -- output message parts (response objects) ----------------------------------------------------


class FileCitation(OpenModel):
    model_config = DROP_EXTRAS

    file_id: str
    filename: str
    index: int
    type: Literal["file_citation"]


class UrlCitation(OpenModel):
    model_config = DROP_EXTRAS

    end_index: int
    start_index: int
    title: str
    type: Literal["url_citation"]
    url: str


class ContainerFileCitation(OpenModel):
    model_config = DROP_EXTRAS

    container_id: str
    end_index: int
    file_id: str
    filename: str
    start_index: int
    type: Literal["container_file_citation"]


class FilePath(OpenModel):
    model_config = DROP_EXTRAS

    file_id: str
    index: int
    type: Literal["file_path"]


Annotation = FileCitation | UrlCitation | ContainerFileCitation | FilePath


def _iterate(value: Any) -> Any:
    """Log-prob sequences accept any iterable (a string iterates its characters, an object its keys)."""
    if isinstance(value, str | list | dict):
        return list(value)
    raise ValueError(f"expected an iterable, got {type(value).__name__}")


AnyIterable = Annotated[list[Any], BeforeValidator(_iterate), StrictForm(list[Any])]


class Logprob(OpenModel):
    """Items of ``bytes`` / ``top_logprobs`` are checked only when dumped (see ``_logprobs``)."""

    model_config = DROP_EXTRAS

    token: str
    bytes: AnyIterable
    logprob: float
    top_logprobs: AnyIterable


class OutputText(OpenModel):
    model_config = DROP_EXTRAS

    annotations: list[Annotation]
    text: str
    type: Literal["output_text"] = "output_text"
    logprobs: list[Logprob] | None = None


class OutputRefusal(OpenModel):
    model_config = DROP_EXTRAS

    refusal: str
    type: Literal["refusal"] = "refusal"


OutputPart = OutputText | OutputRefusal

# -- function_call_output parts (request params) ------------------------------------------------


class TextContentParam(TypedDict, total=False):
    text: Required[str]
    type: Required[Literal["input_text"]]
    prompt_cache_breakpoint: CacheBreakpointParam | None


class ImageContentParam(TypedDict, total=False):
    type: Required[Literal["input_image"]]
    detail: ImageDetail | None
    file_id: str | None
    image_url: str | None
    prompt_cache_breakpoint: CacheBreakpointParam | None


class FileContentParam(TypedDict, total=False):
    type: Required[Literal["input_file"]]
    detail: FileDetail
    file_data: str | None
    file_id: str | None
    file_url: str | None
    filename: str | None
    prompt_cache_breakpoint: CacheBreakpointParam | None


FunctionOutputPart = TextContentParam | ImageContentParam | FileContentParam

# -- custom_tool_call_output parts (response objects) -------------------------------------------


class InputText(OpenModel):
    text: str
    type: Literal["input_text"]
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class InputImage(OpenModel):
    detail: ImageDetail
    type: Literal["input_image"]
    file_id: str | None = None
    image_url: str | None = None
    prompt_cache_breakpoint: CacheBreakpoint | None = None


class InputFile(OpenModel):
    type: Literal["input_file"]
    detail: FileDetail | None = None
    file_data: str | None = None
    file_id: str | None = None
    file_url: str | None = None
    filename: str | None = None
    prompt_cache_breakpoint: CacheBreakpoint | None = None


ToolOutputPart = InputText | InputImage | InputFile
