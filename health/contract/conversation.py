"""Validation of ``AgentInvocation.conversation`` items (Responses-API input items).

Placeholder: accepts any JSON value until the ported item union lands.
"""

from __future__ import annotations

from typing import Any, TypeAlias

__all__ = ["ConversationItem"]

ConversationItem: TypeAlias = Any
