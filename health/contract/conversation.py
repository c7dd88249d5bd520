"""Validation of ``AgentInvocation.conversation`` items (Responses-API input items).

NeMo Gym 0.7.0 validates every conversation item against its Responses-API input-item union; the health
checks never read the items, but one invalid item makes the whole trajectory unreadable. This module
reproduces that accept / reject behaviour exactly, as established by running the reference on generated
items (``benchmarks/dev/conversation_parity.py`` re-checks it against the reference):

* an item's ``type`` selects its model; ``message`` items are routed by role, content and status to the
  easy, input or output message; items without ``type`` are routed by shape, falling back to an MCP
  tool listing that accepts almost anything (see :func:`item_tag`);
* items carrying all of ``prompt_token_ids`` / ``generation_token_ids`` / ``generation_log_probs`` use a
  ``…__training`` variant; some but not all of them (or ``routed_experts`` alone), or badly typed token
  metadata, is an error on any item.

Failure modes, as in the reference:

* a bad item raises pydantic's ``ValidationError``;
* an unhashable ``role``, first content part ``type`` or (input message) ``status`` raises ``TypeError``
  while routing: the reference reports such a trajectory with error ``"TypeError"``;
* output-text log-prob sequences whose items the reference's dump would reject raise ``ValidationError``
  here already (the reference raises the same error name at dump time);
* kept free-form values (``Any`` fields, unknown keys on the models that keep them) nested 254 levels
  deep inside an item fail the canonical dump with ``ValueError``.

Every item is validated into the model of its tag, which dumps to the reference's canonical form.
:data:`Conversation` validates a whole ``conversation`` list in one pydantic call.
"""

from __future__ import annotations

from health.contract._conversation._routing import item_tag
from health.contract._conversation._union import Conversation, ItemModel

__all__ = ["Conversation", "ItemModel", "item_tag"]
