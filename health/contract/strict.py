"""msgspec structs derived from the pydantic contract: the fast way to vouch for a trajectory.

:func:`strict_trajectory` converts a parsed trajectory with structs derived from the pydantic
models and typed dicts (names, defaults, bounds, ``extra``, after-validators; an annotated type
with other validators only where :class:`StrictForm` says what they pass unchanged), strictly: they
accept a subset of what the contract accepts, with the same values, and ``None`` sends the caller
to the contract. Decoded straight from JSON (``raw`` names), a conversation's typed items decode
into derived structs too and its messages, whose model depends on more than their ``type``, are
routed and converted to theirs, the rest meeting the contract in one call; a conversation outside
these forms meets the contract whole.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Annotated, Any, Literal, NotRequired, Required, Union, get_args, get_origin

import annotated_types
import msgspec
from pydantic import BaseModel, TypeAdapter
from pydantic_core import PydanticUndefined
from typing_extensions import NoExtraItems, get_type_hints, is_typeddict

from ._conversation._base import StrictForm
from ._conversation._routing import item_tag
from ._conversation._union import RoutedItems
from .models import TrajectoryRecord

__all__ = ["derive", "strict_trajectory"]

_SCALARS = (str, int, float, bool, type(None))
_BOUNDS = {
    annotated_types.Ge: "ge",
    annotated_types.Gt: "gt",
    annotated_types.Le: "le",
    annotated_types.Lt: "lt",
}
_PLAIN_CONFIG = frozenset({"extra", "protected_namespaces", "defer_build", "revalidate_instances"})
"""``model_config`` keys that change nothing a struct would accept."""


def _bounded(annotation: Any, metadata: list[Any]) -> Any:
    """``annotation`` with its pydantic bounds as msgspec ``Meta`` (on each non-null member)."""
    bounds = {_BOUNDS[type(m)]: getattr(m, _BOUNDS[type(m)]) for m in metadata if type(m) in _BOUNDS}
    if not bounds:
        return annotation
    union = get_origin(annotation) in (Union, types.UnionType)
    members = get_args(annotation) if union else (annotation,)
    bounded = [m if m is type(None) else Annotated[m, msgspec.Meta(**bounds)] for m in members]
    return Union[tuple(bounded)]  # noqa: UP007  (built at run time)


def _is_model(annotation: Any) -> bool:
    """A pydantic model or a typed dict: what derives a struct."""
    return is_typeddict(annotation) or (isinstance(annotation, type) and issubclass(annotation, BaseModel))


def _strict_type(annotation: Any, raw: frozenset[str]) -> Any:
    """The msgspec type standing for a pydantic annotation (models and typed dicts become derived
    structs; a union keeps the members that have a strict form)."""
    if annotation is Any or annotation in _SCALARS:
        return annotation
    if _is_model(annotation):
        return derive(annotation, raw)
    origin = get_origin(annotation)
    if origin is Literal:
        return annotation
    if origin is Annotated:
        inner, *metadata = get_args(annotation)
        form = next((item for item in metadata if isinstance(item, StrictForm)), None)
        if form is not None:
            return _strict_type(form.annotation, raw)
        if all(type(item) in _BOUNDS for item in metadata):
            return _bounded(_strict_type(inner, raw), metadata)
    if origin is list:
        return list[_strict_type(get_args(annotation)[0], raw)]  # type: ignore[misc]
    if origin in (Union, types.UnionType):
        models = sum(_is_model(m) for m in get_args(annotation))
        members = []
        for member in get_args(annotation):
            try:  # several models: each tagged by its ``type`` (an untyped one is refused)
                tag = _type_tag(member) if models > 1 else None
                members.append(derive(member, raw, tag) if tag else _strict_type(member, raw))
            except TypeError:  # accepting less is allowed
                continue
        if members:
            return Union[tuple(members)]  # noqa: UP007
    raise TypeError(f"no strict form for {annotation!r}")


def _type_tag(model: Any) -> str | None:
    """The one value a model's ``type`` field may take (``Literal``), else ``None``."""
    kind = next((field for field in _fields(model) if field[0] == "type"), None) if _is_model(model) else None
    values = get_args(kind[1]) if kind is not None and get_origin(kind[1]) is Literal else ()
    return values[0] if len(values) == 1 and isinstance(values[0], str) else None


def _fields(model: Any) -> list[tuple[str, Any, list[Any], Any, Any]]:
    """``(name, annotation, metadata, default, default factory)`` of a model's or a typed dict's
    fields; an optional key of a typed dict defaults to ``UNSET`` (absent)."""
    if not is_typeddict(model):
        return [
            (name, info.annotation, info.metadata, info.default, info.default_factory)
            for name, info in model.model_fields.items()
        ]
    fields = []
    for name, hint in get_type_hints(model, include_extras=True).items():
        # from the hints, not ``__required_keys__``: a postponed annotation hides ``Required`` there
        wrapper: Any = get_origin(hint)
        required = wrapper is Required or (wrapper is not NotRequired and model.__total__)
        if wrapper in (Required, NotRequired):
            hint = get_args(hint)[0]
        metadata = list(getattr(hint, "__metadata__", ()))
        annotation = get_args(hint)[0] if metadata else hint
        fields.append((name, annotation, metadata, PydanticUndefined if required else msgspec.UNSET, None))
    return fields


def _before(model: type[BaseModel]) -> list[Callable[[Any], Any]]:
    """The model's before-validators (value in, value out), which a struct cannot run."""
    validators = model.__pydantic_decorators__.model_validators.values()
    return [decorator.func for decorator in validators if decorator.info.mode == "before"]


def _own_check(model: Any, before: bool = False) -> None:
    """Refuse (``TypeError``) a model whose validation a struct cannot reproduce (``before``: the
    caller runs its before-validators; a typed dict has none, nor a config)."""
    if is_typeddict(model):  # a closed one, or one with extra items, refuses or types unknown keys
        if hasattr(model, "__pydantic_config__") or getattr(model, "__closed__", None) or (
            getattr(model, "__extra_items__", NoExtraItems) is not NoExtraItems
        ):
            raise TypeError(f"no strict form for {model.__name__}")
        return
    decorators = model.__pydantic_decorators__
    modes = {"after", "before"} if before else {"after"}
    if (
        decorators.validators
        or decorators.field_validators
        or decorators.root_validators
        or any(decorator.info.mode not in modes for decorator in decorators.model_validators.values())
        or not _PLAIN_CONFIG.issuperset(model.model_config)
        or any(info.alias not in (None, name) for name, info in model.model_fields.items())
    ):
        raise TypeError(f"no strict form for {model.__name__}")


@functools.cache
def derive(
    model: Any, raw: frozenset[str] = frozenset(), tag: str | None = None, before: bool = False
) -> type[msgspec.Struct]:
    """The strict struct of ``model`` (a pydantic model or a typed dict), one per model, built on
    first use; ``raw`` names free-form fields kept as :class:`msgspec.Raw` spans when decoded
    straight from JSON; ``tag`` makes a conversation item's struct (tagged by its ``type``,
    refusing unknown keys); ``before``: the caller runs the model's before-validators
    (:func:`_before`) on what it converts."""
    _own_check(model, before)
    fields: list[tuple[str, Any, Any]] = []
    own_validators: dict[str, Callable[[Any], Any]] = {}
    for name, annotation, metadata, model_default, factory in _fields(model):
        if tag is not None and name == "type":
            continue
        kind: Any = Any
        routed = next((item for item in metadata if isinstance(item, RoutedItems)), None)
        if routed is not None and name in raw:
            kind, own_validators[name] = _routed(routed)
        elif any(isinstance(item, StrictForm) for item in metadata):
            kind = _strict_type(Annotated[annotation, *metadata], raw)
        elif any(type(item) not in _BOUNDS for item in metadata):  # pydantic's own validation
            own_validators[name] = TypeAdapter(Annotated[annotation, *metadata]).validate_python  # type: ignore[arg-type]
        elif name in raw and annotation is Any:
            fields.append((name, msgspec.Raw, msgspec.Raw(b"null")))
            continue
        else:
            kind = _bounded(_strict_type(annotation, raw), metadata)
        if factory is not None:
            if isinstance(factory, type) and issubclass(factory, BaseModel):
                factory = derive(factory, raw)
            default: Any = msgspec.field(default_factory=factory)
        elif model_default is PydanticUndefined:
            default = msgspec.NODEFAULT
        else:
            default = model_default
        fields.append((name, kind, default))
    decorators = () if is_typeddict(model) else model.__pydantic_decorators__.model_validators.values()
    after = [decorator.func for decorator in decorators if decorator.info.mode == "after"]

    def __post_init__(self: Any) -> None:
        for name, validate in own_validators.items():
            validate(getattr(self, name))  # raises: the struct is refused
        for check in after:
            check(self)

    # a lone after-validator is the hook itself: one Python call per struct (a row has dozens)
    hook = after[0] if len(after) == 1 and not own_validators else __post_init__
    options: dict[str, Any] = {"tag_field": "type", "tag": tag} if tag is not None else {}
    return msgspec.defstruct(
        model.__name__ + ("Raw" if raw else "") + ("Item" if tag else ""),
        [(name, kind) if value is msgspec.NODEFAULT else (name, kind, value) for name, kind, value in fields],
        namespace={"__post_init__": hook} if own_validators or after else {},
        kw_only=True,
        forbid_unknown_fields=tag is not None or getattr(model, "model_config", {}).get("extra") == "forbid",
        **options,
    )


def _routed(routed: RoutedItems) -> tuple[Any, Callable[[list[Any]], None]]:
    """A conversation's strict type and check: items decode as the derived structs of the models
    their ``type`` alone selects (:func:`item_tag`); a message, whose model depends on more, is
    routed by :func:`item_tag` and converted (after its model's before-validators) to its model's
    struct, else validated by the contract, with the others so left, in one call."""
    tagged: list[Any] = []
    forms: dict[str, tuple[Any, list[Callable[[Any], Any]]]] = {}
    message_keys: dict[str, None] = {}
    for tag, model in routed.models.items():
        kind = _type_tag(model)
        if kind == "message":
            message_keys.update(dict.fromkeys(name for name in model.model_fields if name != "type"))
        try:
            if kind == "message":
                forms[tag] = (msgspec.json.Decoder(derive(model, tag=kind, before=True)).type, _before(model))
            elif kind == tag:
                tagged.append(msgspec.json.Decoder(derive(model, tag=tag)).type)  # msgspec checks the types
        except TypeError:  # no strict form: an item of this kind meets the contract
            continue
    message = msgspec.defstruct(
        "MessageItem",
        [(key, Any, msgspec.UNSET) for key in message_keys],
        tag_field="type",
        tag="message",
        kw_only=True,
        forbid_unknown_fields=True,
    )
    convert = msgspec.convert

    def check(items: list[Any]) -> None:
        found = [item for item in items if item.__class__ is message]
        left = []
        for value in msgspec.to_builtins(found):  # as dicts again (``type`` first, absent keys left out)
            form = forms.get(item_tag(value) or "")
            try:
                if form is None:
                    raise msgspec.ValidationError
                settled = value
                for validator in form[1]:
                    settled = validator(settled)
                convert(settled, form[0])
            except msgspec.ValidationError:  # outside the strict form: the contract decides
                left.append(value)
        if left:
            routed.items.validate_python(left)

    items: Any = Union[(*tagged, message)]  # built at run time
    return list[items], check


_TRAJECTORY = derive(TrajectoryRecord)  # at import: a batch worker builds it before its first line


def strict_trajectory(raw: object) -> Any | None:
    """``raw`` as the derived ``TrajectoryRecord`` struct, or ``None`` where only the contract
    can decide (invalid, or valid only through a lax coercion)."""
    try:
        return msgspec.convert(raw, _TRAJECTORY)
    except Exception:  # msgspec.ValidationError, or whatever a validator raised: ask the contract
        return None
