# ruff: noqa: E501  (one observed case per line)
"""Tests for ``health.contract.conversation``: the Responses-API conversation item union.

Every (item, outcome) pair below was established by running NeMo Gym 0.7.0 (the reference) on the item
inside an otherwise valid trajectory; ``benchmarks/dev/conversation_parity.py`` regenerates and re-checks
the full differential corpus against the reference (it needs the oracle; these tests do not).
"""

from __future__ import annotations

import json
import warnings
from typing import Any, NotRequired, Required

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError
from typing_extensions import TypedDict

from health.contract import canonical_trajectory, conversation
from health.contract.conversation import Conversation, ItemModel, item_tag

ADAPTER: TypeAdapter[list[Any]] = TypeAdapter(list[ItemModel])
MODELS: TypeAdapter[list[Any]] = TypeAdapter(list[ItemModel])


def validate(item: Any) -> Any:
    return ADAPTER.validate_python([item])[0]


# fmt: off
# (item, tag of the model the reference validated it with)
ACCEPTED: list[tuple[Any, str]] = [
    ({'type': 'message', 'role': 'user', 'content': 'hi'}, 'easy_message'),
    ({'role': 'user', 'content': 'hi'}, 'easy_message'),
    ({'role': 'assistant', 'content': 'x'}, 'easy_message'),
    ({'foo': 1}, 'mcp_list_tools'),
    ({}, 'mcp_list_tools'),
    ({'role': 'tool', 'content': 'x'}, 'mcp_list_tools'),
    ({'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': 'a'}], 'status': 'completed'}, 'input_message'),
    ({'role': 'user', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}]}, 'mcp_list_tools'),
    ({'type': 'message', 'role': 'assistant', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}], 'id': 'm'}, 'output_message'),
    ({'role': 'assistant', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}]}, 'mcp_list_tools'),
    ({'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}], 'id': 'm'}, 'output_message'),
    ({'content': [], 'id': 'm'}, 'output_message'),
    ({'content': [{'type': 'input_text', 'text': 'a'}], 'id': 'm'}, 'mcp_list_tools'),
    ({'type': 'message', 'role': 'assistant', 'content': [{'refusal': 'no'}], 'id': 'm'}, 'output_message'),
    ({'type': 'message', 'role': 'user', 'content': [{'type': 'input_video', 'video_url': 'u'}]}, 'easy_message'),
    ({'type': 'message', 'role': 'user', 'content': [{'type': 'input_video', 'video': 'v'}]}, 'easy_message'),
    ({'type': 'message', 'role': 'user', 'content': [{'type': 'input_image', 'detail': 'original'}]}, 'easy_message'),
    ({'type': 'message', 'role': 'user', 'content': 'x', 'phase': 'commentary'}, 'easy_message'),
    ({'type': 'message', 'role': 'user', 'content': 'x', 'status': 'zzz'}, 'easy_message'),
    ({'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': 'a'}], 'status': 'zzz'}, 'easy_message'),
    ({'type': 'message', 'role': 'user', 'content': 'x', 'prompt_token_ids': [1, 2], 'generation_token_ids': [3], 'generation_log_probs': [-0.5]}, 'easy_message__training'),
    ({'type': 'function_call', 'call_id': 'c', 'name': 'n', 'arguments': '{}', 'prompt_token_ids': [1, 2], 'generation_token_ids': [3], 'generation_log_probs': [-0.5]}, 'function_call__training'),
    ({'type': 'custom_tool_call', 'call_id': 'c', 'name': 'n', 'input': 'x', 'prompt_token_ids': [1, 2], 'generation_token_ids': [3], 'generation_log_probs': [-0.5]}, 'custom_tool_call'),
    ({'type': 'function_call', 'call_id': 'c', 'name': 'n', 'arguments': '{}', 'prompt_token_ids': [1, 2], 'generation_token_ids': [3], 'generation_log_probs': [-0.5], 'routed_experts': [[[1]]]}, 'function_call__training'),
    ({'type': 'function_call', 'call_id': 'c', 'name': 'n', 'arguments': '{}', 'prompt_token_ids': [1, 2], 'generation_token_ids': [3], 'generation_log_probs': [-0.5], 'routed_experts': 'b64'}, 'function_call__training'),
    ({'call_id': 5, 'output': 'o'}, 'mcp_list_tools'),
    ({'name': 'n', 'arguments': '{}'}, 'mcp_call'),
    ({'id': 'r', 'summary': []}, 'reasoning'),
    ({'type': 'function_call_output', 'call_id': 'c', 'output': [{'type': 'input_image'}]}, 'function_call_output'),
    ({'type': 'custom_tool_call', 'call_id': 'c', 'name': 'n', 'input': 'x', 'async_': 'zz'}, 'custom_tool_call'),
    ({'type': 'mcp_call', 'name': 'n', 'arguments': '{}', 'error': {'type': 'mcp_tool_execution_error', 'content': None}}, 'mcp_call'),
    ({'type': 'mcp_list_tools', 'tools': [1, 'x', None]}, 'mcp_list_tools'),
    ({'type': 'mcp_approval_response', 'approval_request_id': 'a', 'approve': 'yes'}, 'mcp_approval_response'),
    ({'type': 'compaction_trigger'}, 'compaction_trigger'),
    ({'type': 'web_search_call', 'id': '12', 'status': 'completed', 'action': {'type': 'search', 'query': 'q', 'sources': [{'type': 'url', 'url': 'u'}]}}, 'web_search_call'),
    ({'summary': 5, 'content': 'x', 'id': 'i'}, 'mcp_list_tools'),
    ({'role': 'system', 'content': [], 'status': None}, 'easy_message'),
    ({'type': 'function_call', 'call_id': 'c', 'name': 'n', 'arguments': '{}', 'id': 'i', 'status': 'completed', 'prompt_token_ids': [1, 2], 'generation_token_ids': [3], 'generation_log_probs': ['1']}, 'function_call__training'),
    ({'type': 'shell_call', 'id': 'i', 'call_id': 'c', 'status': 'completed', 'action': {'commands': ['']}, 'environment': {'type': 'container_reference', 'container_id': 'c'}}, 'shell_call'),
    ({'role': 'assistant', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}], 'status': 'completed'}, 'mcp_list_tools'),
    ({'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'custom', 'name': 'c', 'description': 'd', 'format': 5}]}, 'mcp_list_tools'),
    ({'role': 'user', 'content': 'x', 'id': 'm', 'status': 'zzz'}, 'easy_message'),
    ({'role': 'assistant', 'content': 5, 'id': ''}, 'mcp_list_tools'),
    ({'role': 'user', 'content': [], 'id': 'm', 'status': 'zzz'}, 'easy_message'),
    ({'call_id': 'c', 'summary': [], 'id': 'i'}, 'reasoning'),
    ({'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'image_generation', 'quality': []}]}, 'mcp_list_tools'),
    ({'role': 1, 'id': None}, 'mcp_list_tools'),
    ({'id': 'i', 'container_id': 'c', 'status': 'completed', 'code': 'x', 'outputs': [{'type': 'logs', 'logs': 'l'}, {'url': 'u'}]}, 'mcp_list_tools'),
    ({'type': 'message', 'role': 'developer', 'content': 'x', 'id': 'm', 'status': 'zzz'}, 'easy_message'),
    ({'type': 'tool_search_output', 'id': '', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'programmatic_tool_calling'}]}, 'tool_search_output'),
    ({'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'file_search', 'vector_store_ids': [], 'max_num_results': 3}]}, 'mcp_list_tools'),
    ({'id': 'i', 'call_id': 'c', 'status': 'completed', 'action': {'commands': ['ls']}, 'environment': {'type': [], 'container_id': 'c'}}, 'mcp_list_tools'),
    ({'type': 'reasoning', 'id': 'true', 'summary': [{'type': 'summary_text', 'text': 't'}], 'content': [{'type': 'reasoning_text', 'text': 't'}], 'encrypted_content': 'e'}, 'reasoning'),
    ({'id': 'i', 'execution': None, 'status': 'completed', 'tools': [{'type': 'function', 'name': 'f', 'parameters': {'type': 'object'}, 'strict': True, 'description': 'd'}]}, 'mcp_list_tools'),
    ({'role': None, 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}, {'type': 'input_text', 'text': 'a'}], 'id': 'm', 'status': 'zzz'}, 'mcp_list_tools'),
    ({'type': 'mcp_call', 'name': 's', 'arguments': '{}', 'error': {'type': 'mcp_protocol_error', 'code': 1, 'message': 'm'}}, 'mcp_call'),
    ({'role': 'developer', 'tools': [{'type': 'code_interpreter', 'container': None}]}, 'mcp_list_tools'),
    ({'role': 'assistant', 'id': 'm', 'status': 'completed', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': [], 'logprobs': [{'token': 'a', 'bytes': [97], 'logprob': -0.1, 'top_logprobs': [{'token': None, 'bytes': [97], 'logprob': -0.1}]}]}]}, 'output_message'),
    ({'role': 'developer', 'id': 'm', 'status': 'zzz'}, 'mcp_list_tools'),
    ({'call_id': 'c', 'name': 's', 'arguments': '{}', 'id': 'i', 'status': 'completed'}, 'function_call'),
    ({'call_id': 'c', 'name': 'n', 'input': 'x', 'caller': 's'}, 'mcp_list_tools'),
    ({'type': 'function_call', 'call_id': 'c', 'name': 'n', 'arguments': '{}', 'id': 'i', 'status': 'completed'}, 'function_call'),
    ({'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'computer_use_preview', 'display_height': False, 'display_width': 1, 'environment': 'linux'}]}, 'additional_tools'),
    ({'arguments': '{}', 'role': 'assistant'}, 'mcp_list_tools'),
    ({'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 5, 'container': 'c'}]}, 'mcp_list_tools'),
    ({'type': 'computer_call', 'id': 's', 'call_id': 'c', 'status': 'completed', 'pending_safety_checks': [{'id': 's', 'code': 'c', 'message': 'm'}], 'action': {'type': 'click', 'button': 'left', 'x': 1, 'y': 2}}, 'computer_call'),
    ({'type': 'mcp_call', 'id': 'i', 'name': 'n', 'arguments': '{}', 'server_label': 's', 'output': 'o', 'error': {'type': 'http_error', 'code': 500, 'message': 'm'}, 'prompt_token_ids': [1, 2], 'generation_token_ids': ['1'], 'generation_log_probs': [-0.5]}, 'mcp_call'),
    ({'id': 'i', 'status': 'completed', 'action': {'type': 'find_in_page', 'url': None, 'pattern': 'p'}}, 'mcp_list_tools'),
    ({'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'function', 'name': 'f', 'parameters': {'type': [{}]}, 'strict': True, 'description': 'd'}]}, 'additional_tools'),
    ({'type': 'mcp_approval_request', 'id': 'i', 'name': 'n', 'arguments': '{}', 'server_label': 's', 'prompt_token_ids': [1, 2], 'generation_token_ids': [True], 'generation_log_probs': [-0.5]}, 'mcp_approval_request'),
    ({'role': 'developer', 'tools': [{'type': 'programmatic_tool_calling'}]}, 'mcp_list_tools'),
    ({'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'shell'}], 'prompt_token_ids': [True], 'generation_token_ids': [3], 'generation_log_probs': [-0.5]}, 'additional_tools'),
    ({'type': 'apply_patch_call_output', 'id': '12', 'call_id': 'c', 'status': 'failed', 'output': 'o'}, 'apply_patch_call_output'),
    ({'id': 'i', 'call_id': 'c', 'status': 'completed', 'pending_safety_checks': [{'id': [], 'code': 'c', 'message': 'm'}], 'action': {'type': 'click', 'button': 'left', 'x': 1, 'y': 2}}, 'mcp_list_tools'),
    ({'id': 'i', 'call_id': 'c', 'status': None, 'output': 'o'}, 'function_call_output'),
    ({'role': 'developer', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}], 'id': None}, 'mcp_list_tools'),
    ({'type': 'message', 'role': 'system', 'content': 's'}, 'easy_message'),
    ({'role': 1, 'content': [{'refusal': 'r'}], 'status': 'in_progress'}, 'mcp_list_tools'),
    ({'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'namespace', 'description': '', 'name': 'n', 'tools': [{'type': 'function', 'name': 'f'}]}]}, 'additional_tools'),
    ({'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'namespace', 'description': 'd', 'name': 'n', 'tools': []}]}, 'additional_tools'),
    ({'role': 's', 'content': [{'type': 'input_text', 'text': 'a'}, {'type': 'input_image', 'detail': 'low'}, {'type': 'input_file', 'file_data': 'd'}]}, 'mcp_list_tools'),
    ({'type': 'image_generation_call', 'id': 'i', 'status': 'completed', 'result': 'b64', 'size': '1024x1024', 'error': {'type': 'e', 'message': 'm'}, 'prompt_token_ids': [1, 2], 'generation_token_ids': [True], 'generation_log_probs': [-0.5]}, 'image_generation_call'),
    ({'type': 'function_call', 'call_id': 'c', 'name': 'n', 'arguments': '{}', 'status': 'completed'}, 'function_call'),
    ({'type': 'web_search_call', 'id': 'i', 'status': 'completed', 'action': {'type': 'find_in_page', 'url': 'u', 'pattern': 'p'}}, 'web_search_call'),
    ({'id': 'i', 'execution': 'client', 'tools': [{'type': 'programmatic_tool_calling'}]}, 'mcp_list_tools'),
    ({'role': 1, 'content': [], 'id': 'm', 'status': 'zzz'}, 'mcp_list_tools'),
    ({'role': 1, 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}], 'id': 'm', 'status': 'incomplete'}, 'mcp_list_tools'),
    ({'id': 'i', 'queries': ['s'], 'status': 'completed', 'results': [{'file_id': 'f', 'filename': 'n', 'score': 0.5, 'text': 't', 'attributes': {'k': 'v'}}]}, 'mcp_list_tools'),
    ({'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'code_interpreter', 'container': 'c'}], 'prompt_token_ids': ['1'], 'generation_token_ids': [3], 'generation_log_probs': [-0.5]}, 'tool_search_output'),
    ({'role': 'zzz', 'content': [{'type': 'input_text', 'text': 'a'}, {'type': 'output_text', 'text': 'a', 'annotations': []}], 'status': 'in_progress'}, 'mcp_list_tools'),
    ({'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'programmatic_tool_calling'}], 'prompt_token_ids': [1, 2], 'generation_token_ids': [True], 'generation_log_probs': [-0.5]}, 'tool_search_output'),
    ({'type': 'mcp_call', 'id': 'i', 'name': 'n', 'arguments': '{}', 'server_label': 's', 'output': 'o', 'error': {'type': 'http_error', 'code': 500, 'message': 'm', 'zz_extra': 1}}, 'mcp_call'),
    ({'type': 'message', 'content': [{'refusal': 'r'}], 'id': ''}, 'output_message'),
    ({'type': 'file_search_call', 'id': 'i', 'queries': ['q'], 'status': 'completed', 'results': [{}]}, 'file_search_call'),
    ({'id': 'i', 'status': 'completed', 'action': {'type': 'open_page', 'url': None}}, 'mcp_list_tools'),
    ({'id': 'i', 'container_id': 'c', 'status': 'completed', 'code': 'x', 'outputs': None}, 'mcp_list_tools'),
    ({'output': 'o', 'content': 'x', 'name': 'n'}, 'mcp_list_tools'),
    ({'type': 'tool_search_call', 'id': 'i', 'arguments': {'q': 1}, 'execution': 'server', 'status': 'completed', 'prompt_token_ids': [1, 2], 'generation_token_ids': [3], 'generation_log_probs': [-0.5], 'routed_experts': 's'}, 'tool_search_call'),
    ({'type': 'web_search_call', 'id': 'i', 'status': 'completed', 'action': {'type': 'find_in_page', 'url': 'u', 'pattern': 'p'}, 'prompt_token_ids': [1, 2], 'generation_token_ids': [True], 'generation_log_probs': [-0.5]}, 'web_search_call'),
    ({'role': 1, 'content': 'x', 'status': 'zzz'}, 'mcp_list_tools'),
    ({'type': 'image_generation_call', 'id': 'i', 'status': 'completed', 'svg_usage': {'input_tokens': 1, 'output_tokens': 1, 'reasoning_tokens': 0, 'total_tokens': 1, 'model': 'm'}}, 'image_generation_call'),
    ({'type': 'code_interpreter_call', 'id': 'i', 'container_id': 'c', 'status': 'completed', 'code': 's', 'outputs': [{'type': 'logs', 'logs': 'l'}, {'type': 'image', 'url': 'u'}]}, 'code_interpreter_call'),
    ({'role': 'developer', 'tools': [{'type': [], 'name': 'f', 'parameters': {'type': 'object'}, 'strict': True, 'description': 'd'}]}, 'mcp_list_tools'),
    ({'role': 'zzz', 'content': [{'refusal': 'r'}], 'id': None}, 'mcp_list_tools'),
]

REJECTED: list[Any] = [
    {'type': 'message', 'role': 'tool', 'content': 'x'},
    {'type': 'message', 'role': 'user', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}], 'status': 'completed'},
    {'type': 'message', 'role': 'user', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}]},
    {'type': 'message', 'role': 'assistant', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}]},
    {'type': 'message', 'role': 'assistant', 'content': [], 'id': 'm', 'status': None},
    {'type': 'message', 'role': 'assistant', 'content': [{'type': 'input_text', 'text': 'a'}, {'type': 'output_text', 'text': 'a', 'annotations': []}], 'id': 'm'},
    {'type': 'message', 'role': 'assistant', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}, {'type': 'input_text', 'text': 'a'}], 'id': 'm'},
    {'type': 'message', 'role': 'user', 'content': [{'type': 'input_video', 'video_url': ' '}]},
    {'type': 'message', 'role': 'user', 'content': [{'type': 'input_video', 'video_url': 'u', 'video': 'v'}]},
    {'type': 'message', 'role': 'user', 'content': [{'type': 'input_image'}]},
    {'type': 'message', 'role': 'user', 'content': [{'type': 'input_file', 'detail': None}]},
    {'type': 'message', 'role': 'user', 'content': 'x', 'phase': 'zzz'},
    {'type': 'function_call', 'call_id': 'c', 'name': 'n', 'arguments': '{}', 'prompt_token_ids': [1]},
    {'foo': 1, 'prompt_token_ids': [1]},
    {'type': 'function_call', 'call_id': 'c', 'name': 'n', 'arguments': '{}', 'prompt_token_ids': [1.5], 'generation_token_ids': [3], 'generation_log_probs': [-0.5]},
    {'type': 'function_call', 'call_id': 'c', 'name': 'n', 'arguments': '{}', 'prompt_token_ids': [1, 2], 'generation_token_ids': [3], 'generation_log_probs': [-0.5], 'routed_experts': [[1]]},
    {'type': 'function_call', 'call_id': 'c', 'name': 'n', 'arguments': '{}', 'routed_experts': None},
    {'type': 'function_call', 'call_id': 'c', 'name': 'n', 'arguments': {}},
    {'call_id': 'c', 'name': 'n', 'arguments': 5},
    {'call_id': 'c', 'output': 5},
    {'name': 'n', 'arguments': 5},
    {'id': 'r', 'summary': [5]},
    {'id': 5, 'summary': []},
    {'type': 'function_call_output', 'call_id': 'c', 'output': [{'type': 'input_file', 'detail': None}]},
    {'type': 'custom_tool_call_output', 'call_id': 'c', 'output': [{'type': 'input_image'}]},
    {'type': 'custom_tool_call', 'call_id': 'c', 'name': 'n', 'input': 'x', 'async': 'zz'},
    {'type': 'mcp_call', 'name': 'n', 'arguments': '{}', 'error': 'boom'},
    {'type': 'mcp_list_tools', 'tools': {}},
    {'type': 'mcp_approval_response', 'approval_request_id': 'a', 'approve': 2},
    {'type': 'zzz'},
    {'type': ''},
    {'type': 5},
    {'type': None},
    {'type': None, 'role': 'user', 'content': 'x'},
    {'type': 'MESSAGE', 'role': 'user', 'content': 'x'},
    'hi',
    5,
    None,
    [],
    True,
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': '', 'tools': [{'type': 'web_search', 'search_context_size': 'low'}]},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'custom', 'name': 'c', 'description': 'd', 'format': True}]},
    {'type': 'function_call_output', 'call_id': 'c', 'output': 'o', 'prompt_token_ids': [1, 2], 'generation_token_ids': None, 'generation_log_probs': [-0.5]},
    {'type': None, 'role': 'zzz', 'content': [{}], 'id': ''},
    {'type': 'custom_tool_call', 'call_id': 'c', 'name': 'n', 'input': 'x', 'caller': {'type': 'direct'}, 'prompt_token_ids': [1, 2], 'generation_token_ids': [1.5], 'generation_log_probs': [-0.5]},
    {'type': 'additional_tools', 'role': 'developer', 'tools': [{'quality': 'low'}]},
    {'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': None}, {'type': 'input_image', 'detail': 'low'}, {'type': 'input_file', 'file_data': 'd'}]},
    {'type': None, 'role': 'user', 'content': None, 'status': 'in_progress'},
    {'type': 'local_shell_call', 'id': 'i', 'call_id': 'c', 'status': 'completed', 'action': {'type': 'exec', 'command': ['ls'], 'env': {'A': 'b'}, 'timeout_ms': 5}, 'prompt_token_ids': [1, 2], 'generation_token_ids': [3]},
    {'role': 'assistant', 'id': 'm', 'status': 'completed', 'content': [None]},
    {'type': 'reasoning', 'id': 'r', 'summary': [{'type': 'summary_text', 'text': 't'}], 'content': [{'type': {}, 'text': 't'}], 'encrypted_content': 'e'},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 1.5, 'tools': [{'type': 'apply_patch'}]},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': None, 'execution': 'client'}]},
    {'type': 'custom_tool_call', 'call_id': 'c', 'name': None, 'input': 'x', 'caller': {'type': 'direct'}},
    {'type': None, 'role': 1, 'content': None, 'status': 'zzz'},
    {'type': 's', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'web_search_preview', 'search_context_size': 'high'}]},
    {'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': 'a'}, {'a': 1}, {'type': 'input_file', 'file_data': 'd'}]},
    {'type': 'mcp_call', 'name': None, 'arguments': '{}', 'error': {'type': 'mcp_tool_execution_error', 'content': []}},
    {'id': 5, 'call_id': 'c', 'status': 'completed', 'operation': {'type': 'create_file', 'path': 'p', 'diff': 'd'}},
    {'role': 'system', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}], 'id': 5},
    {'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': 'a'}, {'type': 'input_image', 'detail': 'low'}, {'type': 'input_file', 'file_data': {}}]},
    {'role': 'system', 'content': [[]], 'id': 5},
    {'type': 'message', 'role': 'assistant', 'id': 'm', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}, '12', {'type': 'output_text', 'text': 'b', 'annotations': []}]},
    {'type': 'apply_patch_call', 'id': 'i', 'call_id': 'c', 'status': 'completed', 'operation': -1},
    {'type': 'message', 'role': 'assistant', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}, {'type': 'refusal', 'refusal': 'no'}, {'type': 'output_text', 'text': 'b', 'annotations': []}]},
    {'type': None, 'content': [{'refusal': 'r'}], 'id': 'm', 'status': 'zzz'},
    {'type': '12', 'id': 'i', 'name': 'n', 'arguments': '{}', 'server_label': 's'},
    {'type': 's', 'role': 'developer', 'tools': [{'type': 'file_search', 'vector_store_ids': ['v'], 'max_num_results': 3}]},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'tool_search', 'execution': {}}]},
    {'type': 'file_search_call', 'id': 'i', 'queries': ['q'], 'status': 'completed', 'results': ['12']},
    {'type': None, 'role': None, 'content': [{'type': 'input_text', 'text': 'a'}], 'id': None},
    {'type': False, 'name': 'n', 'arguments': '{}', 'error': {'type': 'mcp_protocol_error', 'code': 1, 'message': 'm'}},
    {'type': 'additional_tools', 'role': False, 'tools': [{'type': 'computer_use_preview', 'display_height': 1, 'display_width': 1, 'environment': 'linux'}]},
    {'type': 'computer_call_output', 'call_id': 'c', 'output': {'type': 'computer_screenshot', 'image_url': 2}, 'acknowledged_safety_checks': [{'id': 's'}]},
    {'type': 'custom_tool_call_output', 'call_id': 'c', 'output': [1.5, {'type': 'input_image', 'detail': 'auto'}, {'type': 'input_file'}]},
    {'type': 'image_generation_call', 'id': 'i', 'status': 'completed', 'result': 'b64', 'size': '1024x1024', 'error': {'a': 1}},
    {'type': 'custom_tool_call', 'call_id': 'c', 'name': 'n', 'input': 'x', 'caller': {'type': {'a': 1}, 'caller_id': 'p'}},
    {'type': None, 'role': 1, 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}, {'type': 'input_text', 'text': 'a'}], 'status': 'zzz'},
    {'role': 'user', 'content': [{'type': 'input_text', 'text': 'a'}, None, {'type': 'input_file', 'file_data': 'd'}]},
    {'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': 'a'}, {'type': [1], 'detail': 'low'}, {'type': 'input_file', 'file_data': 'd'}]},
    {'type': None, 'role': 'tool', 'content': [{'refusal': 'r'}], 'id': 'm', 'status': 'incomplete'},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'web_search_preview', 'search_context_size': 2}]},
    {'type': 'tool_search_output', 'id': 'i', 'execution': [1], 'status': 'completed', 'tools': [{'type': 'computer_use_preview', 'display_height': 1, 'display_width': 1, 'environment': 'linux'}]},
    {'type': 'message', 'role': 'zzz', 'content': [], 'id': 5},
    {'type': 'shell_call_output', 'id': 'i', 'call_id': 'c', 'status': 'completed', 'output': [{'stdout': [], 'stderr': '', 'outcome': {'type': 'exit', 'exit_code': 0}}, {'stdout': '', 'stderr': '', 'outcome': {'type': 'timeout'}}]},
    {'type': 'computer_call_output', 'call_id': 'c', 'output': {}, 'acknowledged_safety_checks': [{'id': 's'}]},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'file_search', 'vector_store_ids': ['v'], 'max_num_results': 3}], 'prompt_token_ids': [1, 2], 'generation_token_ids': [3]},
    {'type': None, 'role': 'developer', 'content': [{'refusal': 'r'}]},
    {'type': {'a': 1}, 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'code_interpreter', 'container': 'c'}]},
    {'type': 1.5, 'call_id': 'c', 'output': [{'type': 'input_text', 'text': 't'}, {'type': 'input_image', 'image_url': 'u'}, {'type': 'input_file', 'file_id': 'f'}]},
    {'type': None, 'role': 'assistant', 'content': [[]], 'id': 'm', 'status': 'incomplete'},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'execution': 'client'}]},
    {'type': 'web_search_call', 'id': 'i', 'status': 'completed', 'action': {'type': 'find_in_page', 'url': 1.5, 'pattern': 'p'}},
    {'type': 'web_search_call', 'id': 'i', 'status': 'completed', 'action': ''},
    {'type': 'message', 'content': None, 'status': 'zzz'},
    {'type': 'additional_tools', 'role': -1, 'tools': [{'type': 'web_search_preview', 'search_context_size': 'high'}]},
    {'type': 'function_call_output', 'call_id': 'c', 'output': [{'type': 'input_text', 'text': 't'}, {'type': 'input_image', 'image_url': 'u'}, '']},
    {'type': None, 'id': 'm', 'status': 'zzz'},
    {'role': 'user', 'content': [{}], 'id': ''},
    {'type': 'tool_search_output', 'id': 'i', 'execution': '', 'status': 'completed', 'tools': [{'type': 'computer_use_preview', 'display_height': 1, 'display_width': 1, 'environment': 'linux'}]},
    {'type': 'additional_tools', 'role': 1, 'tools': [{'type': 'code_interpreter', 'container': 'c'}]},
    {'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'code_interpreter', 'container': {'type': ['s'], 'file_ids': ['f']}}]},
    {'role': 'assistant', 'content': [{'type': []}], 'id': 5},
    {'type': 'message', 'role': 'developer', 'content': [[]], 'status': 'completed'},
    {'type': False, 'role': 'developer', 'tools': [{'type': 'custom', 'name': 'c'}]},
    {'type': 'message', 'role': None, 'content': [{}], 'status': None},
    {'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': 'a'}, {'type': 'input_image', 'detail': 'low'}, []]},
    {'role': 'assistant', 'content': [{'type': 'input_text', 'text': 'a'}, {'type': 'output_text', 'text': 'a', 'annotations': []}], 'status': []},
    {'type': 'message', 'role': 'assistant', 'content': [{'type': None, 'refusal': 'r'}], 'status': 'zzz'},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': True, 'name': 'f', 'parameters': {'type': 'object'}, 'strict': True, 'description': 'd'}]},
    {'type': 'additional_tools', 'role': 'developer', 'tools': [{'name': 'c', 'description': 'd', 'format': {'type': 'text'}}]},
    {'type': 'message', 'role': 'user', 'content': [{'type': 'input_file', 'file_id': 'f', 'filename': True}]},
    {'type': 'message', 'role': 'tool', 'content': [{}], 'status': 'zzz'},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 1, 'container': {'type': 'auto', 'file_ids': ['f']}}]},
    {'role': None, 'content': [{'type': ['s']}], 'id': 5},
    {'type': 'message', 'role': 'user', 'content': [{'type': 'input_text', 'text': 'a'}, [], {'type': 'input_file', 'file_data': 'd'}]},
    {'type': 'local_shell_call_output', 'id': 'i', 'output': 'o', 'status': 'completed', 'generation_log_probs': [-0.5]},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'function', 'name': 'f', 'parameters': {'type': 'object'}, 'strict': True, 'description': True}]},
    {'type': 'mcp_list_tools', 'id': 'i', 'server_label': 's', 'tools': 0},
    {'type': 'shell_call_output', 'id': 'i', 'call_id': 'c', 'status': 'completed', 'output': ['true', {'stdout': '', 'stderr': '', 'outcome': {'type': 'timeout'}}]},
    {'type': 'additional_tools', 'role': 0, 'tools': [{'type': 'namespace', 'description': 'd', 'name': 'n', 'tools': [{'type': 'function', 'name': 'f'}]}]},
    {'type': [{}], 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'custom', 'name': 'c', 'description': 'd', 'format': {'type': 'text'}}]},
    {'call_id': 'c', 'output': [{'type': 'input_text', 'text': 't'}, {'type': 'input_image', 'image_url': 'u'}, []]},
    {'type': 'message', 'role': 'system', 'content': [{'type': 'refusal', 'refusal': 'r'}], 'status': None},
    {'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'namespace', 'description': 'd', 'name': 'n', 'tools': [{'type': 'function'}]}]},
    {'type': None, 'role': 1, 'content': [{'type': []}], 'id': 5},
    {'type': 'additional_tools', 'role': [1], 'tools': [{'type': 'apply_patch'}]},
    {'type': None, 'role': 1, 'content': [{'refusal': 'r'}], 'id': None},
    {'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'function', 'name': 'f', 'parameters': {'type': 'object'}, 'strict': {'a': 1}, 'description': 'd'}]},
    {'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'tool_search', 'execution': 'client'}], 'prompt_token_ids': [1, 2], 'generation_log_probs': [-0.5]},
    {'type': 'web_search_call', 'id': 0, 'status': 'completed', 'action': {'type': 'search', 'query': 'q', 'sources': [{'type': 'url', 'url': 'u'}]}},
    {'type': 'reasoning', 'id': 'r', 'summary': [0], 'content': [{'type': 'reasoning_text', 'text': 't'}], 'encrypted_content': 'e'},
    {'type': 'web_search_call', 'id': {'a': 1}, 'status': 'completed', 'action': {'type': 'search', 'query': 'q', 'sources': [{'type': 'url', 'url': 'u'}]}},
    {'type': 'apply_patch_call_output', 'id': 'i', 'call_id': 'c', 'status': 'true', 'output': 'o'},
    {'type': 'message', 'role': '', 'content': [{'type': 'input_text', 'text': 'a'}]},
    {'type': 'message', 'content': [{'type': 'input_text', 'text': 'a'}], 'status': None},
    {'type': 'computer_call_output', 'call_id': 'c', 'output': {'type': 'computer_screenshot', 'image_url': 'u'}, 'acknowledged_safety_checks': [{'id': 1.5}]},
    {'type': 'tool_search_output', 'id': 'i', 'execution': [], 'status': 'completed', 'tools': [{'type': 'function', 'name': 'f', 'parameters': {}}]},
    {'type': 'tool_search_output', 'id': ['s'], 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'function', 'name': 'f', 'parameters': {'type': 'object'}, 'strict': True, 'description': 'd'}]},
    {'type': 'file_search_call', 'id': 'i', 'queries': ['q'], 'status': 'completed', 'results': [{'file_id': 'f', 'filename': ['s'], 'score': 0.5, 'text': 't', 'attributes': {'k': 'v'}}]},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'tool_search', 'execution': 2}]},
    {'type': None, 'role': 'zzz', 'content': [{'type': 'input_text', 'text': 'a'}], 'status': None},
    {'type': 'tool_search_output', 'id': {'a': 1}, 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'image_generation', 'quality': 'low'}]},
    {'role': None, 'content': ['s'], 'id': 5},
    {'type': 1, 'role': 'developer', 'tools': [{'type': 'web_search', 'search_context_size': 'low'}]},
    {'type': 'mcp_call', 'name': 'n', 'arguments': '{}', 'error': {'type': 'mcp_tool_execution_error'}},
    {'type': None, 'role': 'system', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}], 'status': 'in_progress'},
    {'role': 'assistant', 'id': 'm', 'content': ['s', {'type': 'refusal', 'refusal': 'no'}, {'type': 'output_text', 'text': 'b', 'annotations': []}]},
    {'type': 'message', 'role': 'developer', 'content': [{'type': []}], 'status': None},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 1, 'tools': [{'type': 'custom', 'name': 'c', 'description': 'd', 'format': {'type': 'text'}}]},
    {'type': 'additional_tools', 'role': True, 'tools': [{'type': 'namespace', 'description': 'd', 'name': 'n', 'tools': [{'type': 'function', 'name': 'f'}]}]},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'custom', 'name': 'c', 'description': 1, 'format': {'type': 'text'}}]},
    {'type': 'custom_tool_call_output', 'call_id': 'c', 'output': [{'type': 1, 'text': 't'}, {'type': 'input_image', 'detail': 'auto'}, {'type': 'input_file'}]},
    {'type': 'local_shell_call', 'id': 'i', 'call_id': 'c', 'status': {'a': 1}, 'action': {'type': 'exec', 'command': ['ls'], 'env': {'A': 'b'}, 'timeout_ms': 5}},
    {'type': 'message', 'role': 'user', 'id': ''},
    {'type': [], 'id': 'i', 'name': 'n', 'arguments': '{}', 'server_label': 's', 'output': 'o', 'error': {'type': 'http_error', 'code': 500, 'message': 'm'}},
    {'type': 'additional_tools', 'role': '12', 'tools': [{'type': 'code_interpreter', 'container': 'c'}]},
    {'role': 'zzz', 'content': 'x', 'id': 5},
    {'type': 'message', 'role': 'assistant', 'id': 'm', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}, {'type': 'refusal', 'refusal': 'no'}, {'type': 'output_text', 'text': 1, 'annotations': []}]},
    {'type': 'custom_tool_call_output', 'call_id': 1, 'output': [{'type': 'input_text', 'text': 't'}, {'type': 'input_image', 'detail': 'auto'}, {'type': 'input_file'}]},
    {'type': 0, 'role': 'user', 'content': 'hi'},
    {'type': 'web_search_call', 'id': [{}], 'status': 'completed', 'action': {'type': 'search', 'query': 'q', 'sources': [{'type': 'url', 'url': 'u'}]}},
    {'type': None, 'role': 'zzz', 'content': [[]], 'id': ''},
    {'type': 'custom_tool_call_output', 'call_id': 'c', 'output': 'o', 'prompt_token_ids': [1, 2], 'generation_token_ids': [3], 'generation_log_probs': 's'},
    {'type': 'message', 'role': 'user', 'content': [{'type': '', 'video_url': 'u'}]},
    {'type': -1, 'call_id': 'c', 'output': 'o'},
    {'type': 'local_shell_call', 'id': 'i', 'call_id': True, 'status': 'completed', 'action': {'type': 'exec', 'command': ['ls'], 'env': {'A': 'b'}, 'timeout_ms': 5}},
    {'type': 'tool_search_output', 'id': False, 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'local_shell'}]},
    {'type': 'shell_call_output', 'id': 'i', 'call_id': 'c', 'status': 'completed', 'output': [{'stdout': 'o', 'stderr': '', 'outcome': {'type': 'exit', 'exit_code': 0}}, {'stdout': '', 'stderr': -1, 'outcome': {'type': 'timeout'}}]},
    {'type': 'message', 'role': None, 'content': [{}], 'status': []},
    {'type': 'mcp_call', 'name': 'n', 'arguments': '{}', 'error': {'type': 'mcp_protocol_error', 'code': 1, 'message': 'm'}, 'prompt_token_ids': [1, 2], 'generation_token_ids': 's', 'generation_log_probs': [-0.5]},
    {'type': 'message', 'role': 'zzz', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}], 'id': None},
    {'type': 'message', 'role': 1, 'content': ['s']},
    {'type': 'message', 'content': 'x', 'status': 'completed'},
    {'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'computer_use_preview', 'display_height': 1, 'display_width': 1, 'environment': 'linux'}], 'prompt_token_ids': [1, 2]},
    {'type': 'reasoning', 'id': 'r', 'summary': [{'type': 'summary_text', 'text': 't'}], 'content': [{'type': False, 'text': 't'}], 'encrypted_content': 'e'},
    {'type': 'custom_tool_call_output', 'call_id': None, 'output': [{'type': 'input_text', 'text': 't'}, {'type': 'input_image', 'detail': 'auto'}, {'type': 'input_file'}]},
    {'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'code_interpreter', 'container': 'c'}], 'prompt_token_ids': [1, 2], 'generation_token_ids': [3]},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'server', 'status': 'completed', 'tools': [{'type': 1, 'name': 'f', 'parameters': {}}]},
    {'type': 'message', 'role': 1, 'content': [{'type': 'input_text', 'text': 'a'}], 'id': 'm'},
    {'type': None, 'role': 'system', 'content': [{'type': 'input_text', 'text': 'a'}, {'type': 'output_text', 'text': 'a', 'annotations': []}], 'id': 'm', 'status': 'incomplete'},
    {'role': 'user', 'content': [{'type': 5, 'file_id': 'f', 'filename': 'x'}]},
    {'type': None, 'role': 'tool', 'content': [{'type': 'input_text', 'text': 'a'}], 'id': None},
    {'type': 'tool_search_output', 'id': 2, 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'programmatic_tool_calling'}]},
    {'type': 'file_search_call', 'id': 'i', 'queries': ['q'], 'status': 'completed', 'results': [{'file_id': 'f', 'filename': 'n', 'score': 0.5, 'text': 1, 'attributes': {'k': 'v'}}]},
    {'type': None, 'role': None, 'content': [{'type': []}], 'id': 'm'},
    {'role': 'user', 'content': [{'type': 'input_video', 'video_url': []}]},
    {'type': None, 'role': 'tool', 'content': [{'type': 'input_text', 'text': 'a'}]},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': 'file_search', 'vector_store_ids': [2], 'max_num_results': 3}]},
    {'type': 'custom_tool_call', 'call_id': 'c', 'name': True, 'input': 'x', 'caller': {'type': 'direct'}},
    {'type': None, 'role': 'system', 'content': [{'type': []}], 'status': 'completed'},
    {'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'image_generation', 'quality': ['s']}]},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': ['s'], 'container': {'type': 'auto', 'file_ids': ['f']}}]},
    {'type': 'apply_patch_call', 'id': 'i', 'call_id': 'c', 'status': 'completed', 'operation': {'type': 'create_file', 'path': 'p', 'diff': 2}},
    {'type': None, 'role': 'tool', 'content': 5, 'id': ''},
    {'type': None, 'role': None, 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}, {'type': 'input_text', 'text': 'a'}], 'status': []},
    {'type': None, 'role': 'user', 'content': [], 'status': 'completed'},
    {'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'mcp', 'server_label': 's', 'server_url': False, 'headers': {'a': 'b'}}]},
    {'type': 'apply_patch_call', 'id': 'i', 'call_id': 'c', 'status': 'completed', 'operation': {'type': 'create_file', 'path': 'p', 'diff': [1]}},
    {'type': 'shell_call', 'id': 'i', 'call_id': 'c', 'status': ['s'], 'action': {'commands': ['ls']}, 'environment': {'type': 'container_reference', 'container_id': 'c'}},
    {'type': 'additional_tools', 'role': 'developer', 'tools': [{'type': 'namespace', 'description': 'd', 'name': 'n', 'tools': ['12']}]},
    {'type': 'apply_patch_call', 'id': 'i', 'call_id': 'c', 'operation': {'type': 'update_file', 'path': 'p', 'diff': 'd'}},
    {'type': None, 'role': 'system', 'content': ['s'], 'id': None},
    {'type': 'tool_search_output', 'id': 'i', 'execution': 'client', 'status': 'completed', 'tools': [{'type': True, 'container': {'type': 'auto', 'file_ids': ['f']}}]},
    {'type': '', 'role': 'user', 'status': 'completed', 'content': [{'type': 'input_text', 'text': 'a'}]},
    {'type': 'message', 'role': None, 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}], 'status': 'completed'},
    {'type': 'tool_search_call', 'id': 'i', 'arguments': {'q': 1}, 'execution': 'server', 'status': 'true'},
    {'type': 'image_generation_call', 'id': 'i', 'status': 'completed', 'svg_usage': {'input_tokens': [], 'output_tokens': 1, 'reasoning_tokens': 0, 'total_tokens': 2, 'model': 'm'}},
]

# The reference hashes ``role``, a truthy first-part ``type`` and an input message's ``status`` while
# routing, so unhashable values there escape as TypeError (reported as error "TypeError").
RAISES_TYPE_ERROR: list[Any] = [
    {'type': 'message', 'role': 'assistant', 'id': 'm', 'content': [{'type': {'a': 1}, 'text': 'a', 'annotations': []}, {'type': 'refusal', 'refusal': 'no'}, {'type': 'output_text', 'text': 'b', 'annotations': []}]},
    {'type': None, 'role': {}, 'content': [{'type': 'input_text', 'text': 'a'}]},
    {'role': [], 'content': None, 'status': 'in_progress'},
    {'role': [], 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}, {'type': 'input_text', 'text': 'a'}], 'status': []},
    {'type': None, 'role': [], 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}, {'type': 'input_text', 'text': 'a'}], 'id': 'm', 'status': 'incomplete'},
    {'type': None, 'role': {}, 'content': 'x', 'id': 'm'},
    {'type': 'message', 'role': {}, 'content': [], 'id': 'm'},
    {'role': 'user', 'content': [{'type': ['s']}], 'id': None},
    {'type': 'message', 'role': [], 'content': None, 'status': 'in_progress'},
    {'type': 'message', 'role': 'system', 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}, {'type': 'input_text', 'text': 'a'}], 'status': []},
    {'type': 'message', 'role': {}, 'content': [], 'id': 'm', 'status': 'incomplete'},
    {'type': 'message', 'role': [], 'content': [{'type': []}], 'status': None},
    {'type': 'message', 'role': {}, 'content': [], 'id': None},
    {'type': None, 'role': {}, 'content': [{'type': 'output_text', 'text': 'a', 'annotations': []}, {'type': 'input_text', 'text': 'a'}], 'status': 'completed'},
    {'type': None, 'role': [], 'content': [{'type': 'input_text', 'text': 'a'}], 'id': ''},
    {'type': 'message', 'role': 1, 'content': [{'type': ['s']}], 'id': 'm'},
    {'role': {}, 'content': [{}], 'status': 'in_progress'},
    {'type': None, 'role': {}, 'content': [{'type': 'refusal', 'refusal': 'r'}], 'status': None},
    {'role': {}, 'content': [{}], 'id': 'm', 'status': 'incomplete'},
    {'role': {}, 'content': [{'type': None, 'refusal': 'r'}], 'id': None},
    {'type': 'message', 'role': [], 'content': ['s'], 'id': ''},
    {'type': 'message', 'role': {'a': 1}, 'status': 'completed', 'content': [{'type': 'input_text', 'text': 'a'}]},
]
# fmt: on


class TestObservedOutcomes:
    @pytest.mark.parametrize(("item", "tag"), ACCEPTED)
    def test_accepted(self, item: Any, tag: str) -> None:
        validate(item)
        assert item_tag(item) == tag

    @pytest.mark.parametrize("item", REJECTED)
    def test_rejected(self, item: Any) -> None:
        with pytest.raises(ValidationError):
            validate(item)

    @pytest.mark.parametrize("item", RAISES_TYPE_ERROR)
    def test_unhashable_routing_value_raises_type_error(self, item: Any) -> None:
        with pytest.raises(TypeError) as info:
            validate(item)
        assert not isinstance(info.value, ValidationError)


def _nested(levels: int) -> Any:
    value: Any = 0
    for _ in range(levels):
        value = [value]
    return value


def _trajectory(item: Any) -> dict[str, Any]:
    return {
        "task_id": "t",
        "rollout_id": "r",
        "invocations": [{"invocation_id": "main", "conversation": [item]}],
    }


_TOOL_SEARCH = {"type": "tool_search_call", "id": "i", "execution": "server", "status": "completed"}


def _logprobs(token_bytes: Any, top: Any) -> dict[str, Any]:
    entry = {"token": "a", "bytes": token_bytes, "logprob": -0.1, "top_logprobs": top}
    part = {"type": "output_text", "text": "a", "annotations": [], "logprobs": [entry]}
    return {"type": "message", "role": "assistant", "id": "m", "content": [part]}


class TestTrajectoryOutcome:
    """The error name the reference reports for a trajectory holding one such item (refcli health-check)."""

    @pytest.mark.parametrize(
        ("item", "error"),
        [
            ({"type": "message", "role": "user", "content": "x"}, None),
            ({"type": "message", "role": "tool", "content": "x"}, "ValidationError"),
            ("hi", "ValidationError"),
            ({"type": "message", "role": [], "content": "x"}, "TypeError"),
            ({"role": {}, "content": "x"}, "TypeError"),
            # a free-form value fails the dump once nested 254 levels deep inside a conversation item
            ({**_TOOL_SEARCH, "arguments": _nested(253)}, None),
            ({**_TOOL_SEARCH, "arguments": _nested(254)}, "ValueError"),
            ({"zz": _nested(253)}, None),
            ({"zz": _nested(254)}, "ValueError"),
            # log-prob sequences are checked lazily by the reference's dump, whose retries give up after
            # five invalid items in all
            (_logprobs("ab", "ab"), None),
            (_logprobs("ab", "abc"), "ValidationError"),
            (_logprobs("abc", [None]), None),
            (_logprobs("abc", [None, None]), "ValidationError"),
            (_logprobs("abcd", []), None),
            (_logprobs("abcd", "s"), "ValidationError"),
            (_logprobs([1, "x"], [None, None, None]), None),
            (_logprobs([97], [{"token": "a", "bytes": "xyz", "logprob": -0.1}]), None),
            # ... but messages drop unknown keys, so they never reach the dump
            ({"type": "message", "role": "user", "content": "hi", "zz": _nested(300)}, None),
            (
                {
                    "type": "message",
                    "role": "user",
                    "content": [{"type": "input_text", "text": "a", "zz": _nested(300)}],
                },
                None,
            ),
        ],
    )
    def test_error_name(self, item: Any, error: str | None) -> None:
        canonical, name = canonical_trajectory(_trajectory(item))
        assert name == error
        assert (canonical is None) == (error is not None)


class TestCanonicalDump:
    def test_message_drops_unknown_keys(self) -> None:
        item = {"type": "message", "role": "user", "content": "hi", "status": "zzz", "extra": 1}
        assert ADAPTER.dump_python([validate(item)], mode="json") == [
            {"content": "hi", "role": "user", "type": "message", "phase": None}
        ]

    def test_fallback_keeps_unknown_keys_and_fills_defaults(self) -> None:
        assert ADAPTER.dump_python([validate({"foo": 1})], mode="json") == [
            {"id": None, "server_label": None, "tools": [], "type": "mcp_list_tools", "error": None, "foo": 1}
        ]

    def test_output_message_defaults(self) -> None:
        dumped = ADAPTER.dump_python([validate({"role": "assistant", "content": [], "id": "m"})], mode="json")
        assert dumped == [
            {
                "id": "m",
                "content": [],
                "role": "assistant",
                "status": "completed",
                "type": "message",
                "phase": None,
            }
        ]

    def test_training_variant_keeps_token_metadata(self) -> None:
        item = {
            "type": "function_call",
            "call_id": "c",
            "name": "n",
            "arguments": "{}",
            "prompt_token_ids": ["1"],
            "generation_token_ids": [2.0],
            "generation_log_probs": ["0.5"],
        }
        (dumped,) = ADAPTER.dump_python([validate(item)], mode="json")
        assert item_tag(item) == "function_call__training"
        assert dumped["prompt_token_ids"] == [1]
        assert dumped["generation_token_ids"] == [2]
        assert dumped["generation_log_probs"] == [0.5]
        assert dumped["routed_experts"] is None

    def test_invalid_log_prob_sequences_dump_empty(self) -> None:
        logprob = {"token": "a", "bytes": [97], "logprob": -0.1, "top_logprobs": "s"}
        item = {"type": "message", "role": "assistant", "id": "m", "content": [
            {"type": "output_text", "text": "a", "annotations": [], "logprobs": [logprob]}
        ]}  # fmt: skip
        (dumped,) = ADAPTER.dump_python([validate(item)], mode="json")
        assert dumped["content"][0]["logprobs"] == [
            {"token": "a", "bytes": [], "logprob": -0.1, "top_logprobs": []}
        ]

    def test_dump_finds_the_member_without_warnings(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ADAPTER.dump_python([validate({"type": "reasoning", "id": "r", "summary": []})], mode="json")


class TestConversationList:
    """``Conversation`` validates a whole list in one call, with the outcomes of ``list[ItemModel]``."""

    WHOLE: TypeAdapter[list[Any]] = TypeAdapter(Conversation)

    @pytest.mark.parametrize(
        "value",
        [
            [
                {"role": "user", "content": "hi"},
                {"type": "function_call_output", "call_id": "c", "output": "o"},
            ],
            [{"role": "user", "content": "hi"}, {"foo": 1}],
            [{"role": "user", "content": "hi"}, {"type": "message", "role": "tool", "content": "x"}],
            "not a list",
            None,
            [],
        ],
    )
    def test_same_outcome_as_item_list(self, value: Any) -> None:
        try:
            expected = ADAPTER.dump_python(ADAPTER.validate_python(value), mode="json")
        except ValidationError:
            with pytest.raises(ValidationError):
                self.WHOLE.validate_python(value)
            return
        assert self.WHOLE.dump_python(self.WHOLE.validate_python(value), mode="json") == expected

    def test_unhashable_role_still_raises_type_error(self) -> None:
        with pytest.raises(TypeError):
            self.WHOLE.validate_python([{"role": "user", "content": "x"}, {"role": [], "content": "x"}])


class TestAsFieldAnnotation:
    def test_list_of_items_in_a_model(self) -> None:
        class Invocation(BaseModel):
            model_config = ConfigDict(extra="forbid")
            conversation: list[ItemModel] = Field(default_factory=list)

        invocation = Invocation.model_validate(
            {
                "conversation": [
                    {"role": "user", "content": "hi"},
                    {"type": "function_call_output", "call_id": "c", "output": "o"},
                ]
            }
        )
        assert [item_tag(item) for item in invocation.conversation] == [
            "easy_message",
            "function_call_output",
        ]
        with pytest.raises(ValidationError):
            Invocation.model_validate({"conversation": [{"type": "message", "role": "tool", "content": "x"}]})


_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from(["", "user", "assistant", "message", "completed"]),
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "type",
                    "role",
                    "content",
                    "status",
                    "id",
                    "call_id",
                    "name",
                    "arguments",
                    "output",
                    "summary",
                    "text",
                ]
            ),
            children,
            max_size=5,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(_json)
def test_only_validation_or_type_errors_escape(item: Any) -> None:
    try:
        value = validate(item)
    except (ValidationError, TypeError):
        return
    ADAPTER.dump_python([value], mode="json")


def test_public_api() -> None:
    assert conversation.__all__ == ["Conversation", "ItemModel", "item_tag"]


class TestFastPath:
    """Everyday items skip the models; their canonical dicts must equal the models' dumps."""

    @pytest.mark.parametrize(("item", "tag"), ACCEPTED)
    def test_same_canonical_form_as_the_models(self, item: Any, tag: str) -> None:
        assert ADAPTER.dump_python([validate(item)], mode="json") == MODELS.dump_python(
            MODELS.validate_python([item]), mode="json"
        )

    @settings(max_examples=150, deadline=None)
    @given(
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant", "system", "developer"])},
            optional={
                "type": st.just("message"),
                "id": st.sampled_from(["m", ""]),
                "phase": st.sampled_from([None, "commentary", "final_answer"]),
                "status": st.sampled_from(["completed", "in_progress"]),
                "content": st.one_of(
                    st.text(max_size=5),
                    st.lists(
                        st.fixed_dictionaries({"type": st.just("input_text"), "text": st.text(max_size=3)}),
                        max_size=2,
                    ),
                    st.lists(
                        st.fixed_dictionaries(
                            {
                                "type": st.just("output_text"),
                                "text": st.text(max_size=3),
                                "annotations": st.just([]),
                            },
                            optional={"logprobs": st.none()},
                        ),
                        min_size=1,
                        max_size=2,
                    ),
                ),
            },
        )
    )
    def test_generated_messages(self, item: dict[str, Any]) -> None:
        try:
            expected = MODELS.dump_python(MODELS.validate_python([item]), mode="json")
        except ValidationError:
            with pytest.raises(ValidationError):
                validate(item)
            with pytest.raises(ValidationError):
                TestConversationList.WHOLE.validate_python([item])
            return
        assert ADAPTER.dump_python([validate(item)], mode="json") == expected
        whole = TestConversationList.WHOLE
        assert whole.dump_python(whole.validate_python([item, item]), mode="json") == expected * 2


def test_invalid_token_metadata_routes_to_no_model() -> None:
    item = {"type": "function_call", "call_id": "c", "name": "n", "arguments": "{}", "prompt_token_ids": [1]}
    tag = item_tag(item)
    assert tag is not None and "missing" in tag
    with pytest.raises(ValidationError, match="generation_log_probs, generation_token_ids"):
        validate(item)


_EVERYDAY_TEMPLATES: list[dict[str, Any]] = [
    {"role": "user", "content": "hi"},
    {"type": "message", "role": "developer", "content": "hi", "phase": "commentary"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    {"type": "message", "role": "assistant", "content": [{"type": "input_text", "text": "hi"}]},
    {
        "type": "message",
        "role": "user",
        "content": [
            {"type": "input_text", "text": "hi", "prompt_cache_breakpoint": {"mode": "explicit"}},
            {"type": "input_image", "detail": "auto", "image_url": "u"},
            {"type": "input_file", "file_id": "f", "filename": "a.txt"},
        ],
    },
    {"type": "message", "role": "system", "status": "completed", "content": [{"type": "input_text", "text": "hi"}]},
    {"type": "message", "role": "user", "content": [{"type": "input_video", "video_url": "v"}]},
    {
        "type": "function_call_output",
        "call_id": "c",
        "output": [{"type": "input_text", "text": "o"}, {"type": "input_image", "image_url": "u"}],
    },
    {
        "type": "message",
        "role": "assistant",
        "id": "m",
        "status": "completed",
        "content": [
            {"type": "output_text", "text": "a", "annotations": [], "logprobs": None},
            {"type": "refusal", "refusal": "no"},
        ],
    },
    {
        "role": "assistant",
        "id": "m",
        "content": [{"type": "output_text", "text": "a", "annotations": []}],
    },
    {
        "type": "function_call",
        "call_id": "c",
        "name": "f",
        "arguments": "{}",
        "id": "i",
        "status": "in_progress",
    },
    {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "namespace": "n"},
    {"type": "function_call_output", "call_id": "c", "output": "o", "id": "i", "status": "completed"},
    {
        "type": "reasoning",
        "id": "r",
        "summary": [{"type": "summary_text", "text": "s"}],
        "content": [{"type": "reasoning_text", "text": "t"}],
        "encrypted_content": "e",
    },
]
_MUTATION_KEYS = st.sampled_from(
    [
        "type",
        "role",
        "content",
        "phase",
        "id",
        "status",
        "arguments",
        "call_id",
        "name",
        "namespace",
        "output",
        "summary",
        "encrypted_content",
        "prompt_token_ids",
        "extra",
    ]
)
_MUTATION_VALUES = st.sampled_from(
    [
        None,
        "",
        "x",
        "user",
        "assistant",
        "message",
        "completed",
        "incomplete",
        "final_answer",
        0,
        True,
        [],
        {},
    ]
)


@st.composite
def _everyday_item(draw: st.DrawFn) -> dict[str, Any]:
    """A plainly valid everyday item, then a few keys dropped, set or nested parts changed."""
    item: dict[str, Any] = json.loads(json.dumps(draw(st.sampled_from(_EVERYDAY_TEMPLATES))))
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(sorted(item) or ["type"]) | _MUTATION_KEYS)
        if draw(st.booleans()):
            item.pop(key, None)
        else:
            item[key] = draw(_MUTATION_VALUES)
    for parts_key in ("content", "summary", "content", "output"):
        parts = item.get(parts_key)
        if isinstance(parts, list) and parts and draw(st.booleans()):
            part = parts[draw(st.integers(0, len(parts) - 1))]
            if isinstance(part, dict):
                key = draw(st.sampled_from(["type", "text", "annotations", "logprobs", "refusal", "detail", "video"]))
                part[key] = draw(_MUTATION_VALUES | st.sampled_from(["input_text", "input_video", "auto"]))
    return item


def _one_invocation(items: list[Any]) -> dict[str, Any]:
    return {"task_id": "t", "rollout_id": "r", "invocations": [{"invocation_id": "i", "conversation": items}]}


class _OpenParam(TypedDict, total=False):
    a: Required[int]
    b: NotRequired[str]


class _ClosedParam(TypedDict, closed=True):  # type: ignore[call-arg]
    a: int


class TestDerivedStructs:
    """The structs derived from the contract (``health.contract.strict``) vouch for a
    conversation exactly where the contract accepts it."""

    def test_typed_dicts_derive_structs_with_their_required_keys(self) -> None:
        import msgspec

        from health.contract._conversation._parts import InputImageParam
        from health.contract.strict import derive

        image: Any = derive(InputImageParam)
        part = {"type": "input_image", "detail": "auto", "image_url": "u", "other": 1}  # pydantic drops "other"
        assert msgspec.convert(part, image).detail == "auto"
        with pytest.raises(msgspec.ValidationError, match="detail"):  # ``Required`` in a postponed hint
            msgspec.convert({"type": "input_image", "image_url": "u"}, image)
        assert msgspec.convert({"a": 1}, derive(_OpenParam)).b is msgspec.UNSET  # type: ignore[attr-defined]
        with pytest.raises(TypeError, match="no strict form"):  # pydantic refuses its unknown keys
            derive(_ClosedParam)

    @pytest.mark.parametrize("item", [item for item, _ in ACCEPTED] + REJECTED + RAISES_TYPE_ERROR)
    def test_observed_items(self, item: Any) -> None:
        from health.contract import check_trajectory
        from health.contract.strict import strict_trajectory

        raw = _one_invocation([item])
        assert (strict_trajectory(raw) is not None) == (check_trajectory(raw)[0] is not None)

    @settings(max_examples=500, deadline=None)
    @given(st.lists(_everyday_item(), min_size=1, max_size=3) | st.lists(_json, max_size=2))
    def test_generated_items(self, items: list[Any]) -> None:
        from health.contract import check_trajectory
        from health.contract.strict import strict_trajectory

        raw = _one_invocation(items)
        assert (strict_trajectory(raw) is not None) == (check_trajectory(raw)[0] is not None)


def _fast_form_accepts(items: Any) -> bool:
    """Whether the fast road's form of a conversation (typed items as derived structs, messages
    through the contract; ``health.contract.strict``) accepts ``items`` decoded from JSON."""
    import msgspec

    from health.contract.models import AgentInvocation
    from health.contract.strict import derive

    decoder = msgspec.json.Decoder(derive(AgentInvocation, frozenset({"conversation"})))
    try:
        decoder.decode(json.dumps({"invocation_id": "i", "conversation": items}).encode())
    except msgspec.ValidationError:
        return False
    return True


class TestFastConversation:
    """The fast road's conversation form accepts only what the contract accepts (what it refuses,
    the contract decides), and it accepts every everyday item."""

    @pytest.mark.parametrize("item", [item for item, _ in ACCEPTED] + REJECTED + RAISES_TYPE_ERROR)
    def test_observed_items(self, item: Any) -> None:
        from health.contract import check_trajectory

        if _fast_form_accepts([item]):
            assert check_trajectory(_one_invocation([item]))[0] is not None

    @pytest.mark.parametrize("item", [item for item in _EVERYDAY_TEMPLATES if "type" in item])
    def test_everyday_typed_items_take_it(self, item: Any) -> None:
        assert _fast_form_accepts([item, item])

    @settings(max_examples=500, deadline=None)
    @given(st.lists(_everyday_item(), min_size=1, max_size=3) | st.lists(_json, max_size=2))
    def test_generated_items(self, items: list[Any]) -> None:
        from health.contract import check_trajectory

        if _fast_form_accepts(items):
            assert check_trajectory(_one_invocation(items))[0] is not None
