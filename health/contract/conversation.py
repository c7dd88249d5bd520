"""Validation of ``AgentInvocation.conversation`` items (Responses-API input items).

The checks never read the items, but NeMo Gym 0.7.0 makes a trajectory with one invalid item
unreadable; this reproduces its accept / reject behaviour and error names exactly (re-checked
against the reference by ``benchmarks/dev/conversation_parity.py``). An item's ``type`` (else
its shape, see :func:`item_tag`) selects its model; :data:`Conversation` validates a whole list.
"""

from __future__ import annotations

from health.contract._conversation._routing import item_tag
from health.contract._conversation._union import Conversation, ItemModel

__all__ = ["Conversation", "ItemModel", "item_tag"]
