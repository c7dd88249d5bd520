"""Validation of ``AgentInvocation.conversation`` items (Responses-API input items).

NeMo Gym validates every conversation item against its Responses-API input-item union. The health
checks never read the items, but one invalid item makes the whole trajectory unreadable, so the accept /
reject behaviour here is reproduced exactly (established by running the reference on generated items).

Failure modes, as in the reference:

* a bad item raises pydantic's ``ValidationError``;
* an unhashable ``role`` (and, on an input-message candidate, an unhashable ``status``) raises
  ``TypeError`` during validation: the reference reports such a trajectory with error ``"TypeError"``;
* items keep unknown keys (except inside request-style content parts), so a kept value nested too deeply
  fails later, at dump time, with ``ValueError``.
"""

from __future__ import annotations

from health.contract._conversation._routing import item_tag
from health.contract._conversation._union import ConversationItem, ItemModel

__all__ = ["ConversationItem", "ItemModel", "item_tag"]
