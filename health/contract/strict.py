"""msgspec structs derived from the pydantic contract: the fast way to vouch for a trajectory.

:func:`strict_trajectory` converts a parsed trajectory with structs derived from the pydantic
models (names, defaults, bounds, ``extra``, after-validators), strictly: they accept a subset of
what the contract accepts, with the same values, and ``None`` sends the caller to the contract.
"""

from __future__ import annotations

import functools
import types
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import annotated_types
import msgspec
from pydantic import BaseModel, TypeAdapter
from pydantic_core import PydanticUndefined

from .models import TrajectoryRecord

__all__ = ["derive", "strict_trajectory"]

_SCALARS = (str, int, float, bool, type(None))
_BOUNDS = {
    annotated_types.Ge: "ge",
    annotated_types.Gt: "gt",
    annotated_types.Le: "le",
    annotated_types.Lt: "lt",
}


def _bounded(annotation: Any, metadata: list[Any]) -> Any:
    """``annotation`` with its pydantic bounds as msgspec ``Meta`` (on each non-null member)."""
    bounds = {_BOUNDS[type(m)]: getattr(m, _BOUNDS[type(m)]) for m in metadata if type(m) in _BOUNDS}
    if not bounds:
        return annotation
    union = get_origin(annotation) in (Union, types.UnionType)
    members = get_args(annotation) if union else (annotation,)
    bounded = [m if m is type(None) else Annotated[m, msgspec.Meta(**bounds)] for m in members]
    return Union[tuple(bounded)]  # noqa: UP007  (built at run time)


def _strict_type(annotation: Any, raw: frozenset[str]) -> Any:
    """The msgspec type standing for a pydantic annotation (models become derived structs)."""
    if annotation is Any or annotation in _SCALARS:
        return annotation
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return derive(annotation, raw)
    origin = get_origin(annotation)
    if origin is Literal:
        return annotation
    if origin is list:
        return list[_strict_type(get_args(annotation)[0], raw)]  # type: ignore[misc]
    if origin in (Union, types.UnionType):
        return Union[tuple(_strict_type(member, raw) for member in get_args(annotation))]  # noqa: UP007
    raise TypeError(f"no strict form for {annotation!r}")


@functools.cache
def derive(model: type[BaseModel], raw: frozenset[str] = frozenset()) -> type[msgspec.Struct]:
    """The strict struct of ``model``, one per model, built on first use; ``raw`` names free-form
    fields kept as :class:`msgspec.Raw` spans when decoded straight from JSON."""
    fields: list[tuple[str, Any, Any]] = []
    own_validators: dict[str, TypeAdapter[Any]] = {}
    for name, info in model.model_fields.items():
        if any(type(item) not in _BOUNDS for item in info.metadata):  # pydantic's own validation
            own_validators[name] = TypeAdapter(Annotated[info.annotation, *info.metadata])  # type: ignore[arg-type]
            kind: Any = Any
        elif name in raw and info.annotation is Any:
            fields.append((name, msgspec.Raw, msgspec.Raw(b"null")))
            continue
        else:
            kind = _bounded(_strict_type(info.annotation, raw), info.metadata)
        factory: Any = info.default_factory
        if factory is not None:
            if isinstance(factory, type) and issubclass(factory, BaseModel):
                factory = derive(factory, raw)
            default = msgspec.field(default_factory=factory)
        elif info.default is PydanticUndefined:
            default = msgspec.NODEFAULT
        else:
            default = info.default
        fields.append((name, kind, default))
    after = [
        decorator.func
        for decorator in model.__pydantic_decorators__.model_validators.values()
        if decorator.info.mode == "after"
    ]

    def __post_init__(self: Any) -> None:
        for name, adapter in own_validators.items():
            adapter.validate_python(getattr(self, name))  # raises: the struct is refused
        for check in after:
            check(self)

    namespace = {"__post_init__": __post_init__} if own_validators or after else {}
    return msgspec.defstruct(
        model.__name__ + ("Raw" if raw else ""),
        [(name, kind) if value is msgspec.NODEFAULT else (name, kind, value) for name, kind, value in fields],
        namespace=namespace,
        kw_only=True,
        forbid_unknown_fields=model.model_config.get("extra") == "forbid",
    )


_TRAJECTORY = derive(TrajectoryRecord)  # at import: a batch worker builds it before its first line


def strict_trajectory(raw: object) -> Any | None:
    """``raw`` as the derived ``TrajectoryRecord`` struct, or ``None`` where only the contract
    can decide (invalid, or valid only through a lax coercion)."""
    try:
        return msgspec.convert(raw, _TRAJECTORY)
    except Exception:  # msgspec.ValidationError, or whatever a validator raised: ask the contract
        return None
