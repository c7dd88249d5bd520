"""Base classes mirroring the two flavours of Responses-API types.

Response objects are models that keep unknown keys (``extra="allow"``), so unknown keys survive into the
canonical dump. Request "params" are typed dicts that silently drop unknown keys. The difference matters:
an unknown key nested deeper than the dump limit fails the dump only where it is kept.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict

__all__ = ["DEFERRED", "DROP_EXTRAS", "ItemStatus", "OpenModel", "StrictForm"]

ItemStatus = Literal["in_progress", "completed", "incomplete"]


DEFERRED = ConfigDict(defer_build=True)
"""Validators built on first use, not at import: everyday rows never need the contract's pydantic
validators (the derived structs vouch for them), so a batch check or a service pays for them only
once a row does."""


class OpenModel(BaseModel):
    """A response object: unknown keys are accepted and kept (unless the model says ``DROP_EXTRAS``)."""

    model_config = ConfigDict(extra="allow", protected_namespaces=(), defer_build=True)

    item_tag: ClassVar[str | None] = None
    """Union tag of a conversation item model (set by the union); lets serialization find the member."""


DROP_EXTRAS = ConfigDict(extra="ignore")
"""Config of the (message and function-call) models whose unknown keys are dropped from the dump."""


class StrictForm(NamedTuple):
    """``Annotated`` metadata for the structs derived from the contract (``health.contract.strict``):
    a type whose values the annotated type's validators pass unchanged, standing for it there."""

    annotation: Any
