"""The ``ng_trajectory`` contract has one definition, the pydantic models (``health.contract``);
every other encoding of it is checked against them here, and any drift fails naming the field:

* the msgspec mirror (``health.strict_schema``), walked from ``TrajectoryRecord`` down: every
  model reached has a mirror with the same fields and the same type shapes;
* the everyday conversation structs (``health.strict_conversation``) and the recognisers' key
  sets (``health.contract._conversation._fast``, ``health.rejection``);
* the C path tables (``health/_strict_paths.h``), parsed from the header's text, so the check
  runs whether or not the native part is built.

(``tests/health/test_strict_schema.py`` checks the mirror's defaults, bounds and literals per
pair; this file finds the pairs by walking, so a new model or field cannot be left out.)
"""

from __future__ import annotations

import re
import types
import typing
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from pydantic import BaseModel

from health import rejection, strict_conversation, strict_schema
from health.contract import models
from health.contract._conversation import _fast, _messages, _parts, _tool_items, _training
from health.contract._conversation._base import ItemStatus

HEADER = Path(strict_schema.__file__).with_name("_strict_paths.h")
_UNION = (typing.Union, types.UnionType)


def _shape(tp: Any, where: str) -> Any:
    """A comparable form of a type: scalars by name, ``Literal`` by values, lists by their item,
    unions as sets, models and structs as ``"model"`` (:func:`_mirror_pairs` pairs them), free
    values (``Any``, msgspec ``Raw``) as ``"any"``."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    origin = typing.get_origin(tp)
    if tp is Any or tp is msgspec.Raw:
        return "any"
    if tp is type(None):
        return "null"
    if origin is typing.Literal:
        return ("literal", frozenset(typing.get_args(tp)))
    if origin in _UNION:
        return frozenset(_shape(arg, where) for arg in typing.get_args(tp))
    if origin in (list, Sequence):
        (item,) = typing.get_args(tp)
        return ("list", _shape(item, where))
    if origin is dict or tp is dict:
        return "object"
    if isinstance(tp, type) and issubclass(tp, BaseModel | msgspec.Struct):
        return ("model", tp.__name__ if issubclass(tp, BaseModel) else "")
    if tp in (str, int, float, bool):
        return tp.__name__
    raise AssertionError(f"{where}: a type this check does not know: {tp!r}")


def _models(tp: Any) -> list[type[Any]]:
    """The models or structs inside a type, in order."""
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    if isinstance(tp, type) and issubclass(tp, BaseModel | msgspec.Struct):
        return [tp]
    return [found for arg in typing.get_args(tp) for found in _models(arg)]


def _erase_names(shape: Any) -> Any:
    """A shape with model names dropped (the mirror's structs have their own names)."""
    if isinstance(shape, tuple) and shape[0] == "model":
        return ("model",)
    if isinstance(shape, tuple) and shape[0] == "list":
        return ("list", _erase_names(shape[1]))
    if isinstance(shape, frozenset):
        return frozenset(_erase_names(part) for part in shape)
    return shape


def _mirror_pairs() -> Iterator[tuple[type[msgspec.Struct], type[BaseModel]]]:
    """Each (mirror, model) pair reachable from ``(StrictTrajectory, TrajectoryRecord)``."""
    todo: list[tuple[type[Any], type[Any]]] = [(strict_schema.StrictTrajectory, models.TrajectoryRecord)]
    seen: set[type[Any]] = set()
    while todo:
        strict, model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        yield strict, model
        strict_types = {field.name: field.type for field in msgspec.structs.fields(strict)}
        for name, info in model.model_fields.items():
            if name == "conversation" or name not in strict_types:
                continue  # the conversation: checked item by item below; a missing name: reported there
            inner, mirrored = _models(info.annotation), _models(strict_types[name])
            assert len(inner) == len(mirrored), (
                f"{model.__name__}.{name}: models {inner} mirrored by {mirrored}"
            )
            todo.extend(zip(mirrored, inner, strict=True))


PAIRS = list(_mirror_pairs())


class TestStrictMirror:
    def test_the_walk_reaches_every_model_of_the_contract(self) -> None:
        reached = {model for _, model in PAIRS}
        declared = {getattr(models, name) for name in models.__all__}
        assert declared <= reached, f"contract models the walk never reached: {declared - reached}"

    @pytest.mark.parametrize(("strict", "model"), PAIRS, ids=[model.__name__ for _, model in PAIRS])
    def test_fields_and_type_shapes_match(self, strict: type[msgspec.Struct], model: type[BaseModel]) -> None:
        strict_fields = {field.name: field.type for field in msgspec.structs.fields(strict)}
        for name in model.model_fields.keys() - strict_fields.keys():
            pytest.fail(f"{model.__name__}.{name} has no field in its mirror {strict.__name__}")
        for name in strict_fields.keys() - model.model_fields.keys():
            pytest.fail(f"{strict.__name__}.{name} is not a field of the contract's {model.__name__}")
        for name, info in model.model_fields.items():
            if name == "conversation":
                continue
            where = f"{model.__name__}.{name}"
            want = _erase_names(_shape(info.annotation, where))
            have = _erase_names(_shape(strict_fields[name], f"{strict.__name__}.{name}"))
            assert have == want, (
                f"{where}: the contract says {want}, the mirror {strict.__name__} says {have}"
            )


def _fields(*kinds: type[Any]) -> set[str]:
    names: set[str] = set()
    for kind in kinds:
        names |= set(kind.model_fields) if issubclass(kind, BaseModel) else set(kind.__struct_fields__)
    return names


def _literal_values(tp: Any) -> frozenset[Any]:
    return frozenset(
        value
        for part in [tp, *typing.get_args(tp)]
        if typing.get_origin(part) is typing.Literal
        for value in typing.get_args(part)
    )


_TOKEN_FIELDS = set(_training._TokenMetadata.model_fields) - {"routed_experts"}

#: Each everyday struct and the contract models it decodes (with their training variants).
_EVERYDAY = [
    (
        strict_conversation._Message,
        (_messages.EasyInputMessage, _messages.InputMessage, _messages.OutputMessage),
        True,
    ),
    (strict_conversation._FunctionCall, (_tool_items.FunctionCall,), True),
    (strict_conversation._FunctionCallOutput, (_tool_items.FunctionCallOutput,), False),
    (strict_conversation._Reasoning, (_tool_items.Reasoning,), True),
    (strict_conversation._InputText, (_parts.InputText,), False),
    (strict_conversation._OutputText, (_parts.OutputText,), False),
    (strict_conversation._Refusal, (_parts.OutputRefusal,), False),
]


class TestEverydayItems:
    @pytest.mark.parametrize(
        ("struct", "contract", "training"), _EVERYDAY, ids=[s.__name__ for s, _, _ in _EVERYDAY]
    )
    def test_structs_hold_only_their_models_fields_and_tag(
        self, struct: type[msgspec.Struct], contract: tuple[type[BaseModel], ...], training: bool
    ) -> None:
        allowed = _fields(*contract) | (_TOKEN_FIELDS if training else set())
        for name in set(struct.__struct_fields__) - allowed:
            pytest.fail(f"{struct.__name__}.{name} is not a field of {[m.__name__ for m in contract]}")
        tag = struct.__struct_config__.tag
        tags = set().union(*(_literal_values(m.model_fields["type"].annotation) for m in contract))
        assert tag in tags, f"{struct.__name__}: tag {tag!r}, the contract's types {tags}"

    @pytest.mark.parametrize(
        ("struct", "model"),
        [
            (strict_conversation._SummaryText, _tool_items.SummaryText),
            (strict_conversation._ReasoningText, _tool_items.ReasoningText),
        ],
    )
    def test_reasoning_parts_match(self, struct: type[msgspec.Struct], model: type[BaseModel]) -> None:
        assert set(struct.__struct_fields__) == set(model.model_fields), model.__name__

    def test_recogniser_key_sets_are_the_contracts(self) -> None:
        assert frozenset(_training._TokenMetadata.model_fields) == _fast._TOKEN_KEYS
        assert frozenset(_parts.OutputText.model_fields) == _fast._OUTPUT_TEXT_KEYS
        assert _literal_values(_messages.EasyInputMessage.model_fields["role"].annotation) == _fast._ROLES
        assert frozenset(typing.get_args(ItemStatus)) == _fast._STATUSES
        assert frozenset(typing.get_args(_messages.Phase)) == _fast._PHASES

    def test_rejections_key_sets_and_lenient_reads_are_the_contracts(self) -> None:
        assert frozenset(models.TrajectoryTokenStats.model_fields) == rejection._TOKEN_STATS_KEYS
        assert frozenset(models.TrajectoryResponseMetadata.model_fields) == rejection._RESPONSE_METADATA_KEYS
        for struct, model in (
            (rejection._LenientTrajectory, models.TrajectoryRecord),
            (rejection._LenientCall, models.TrajectoryModelCall),
        ):
            for name in set(struct.__struct_fields__) - set(model.model_fields):
                pytest.fail(f"{struct.__name__}.{name} is not a field of {model.__name__}")


def _header() -> str:
    return re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)  # comments name fields too


def _string_array(text: str, name: str) -> tuple[str, ...]:
    match = re.search(rf"{name}\[\]\s*=\s*\{{(.*?)\}};", text, flags=re.S)
    assert match is not None, f"{HEADER.name}: no array {name}"
    return tuple(re.findall(r'"([^"]*)"', match[1]))


def _member_keys(text: str) -> dict[str, set[str]]:
    """The keys ``record_member`` names in each ``case RECORD_...:`` of its switch."""
    body = text[text.index("record_member(") :]
    cases = re.split(r"case (RECORD_\w+):", body[: body.index("return MEMBER_KEPT;\n}")])
    return {
        cases[i]: set(re.findall(r'key_is\(key, length, "([^"]+)"\)', cases[i + 1]))
        for i in range(1, len(cases), 2)
    }


def _raw_fields(struct: type[msgspec.Struct]) -> set[str]:
    return {field.name for field in msgspec.structs.fields(struct) if field.type is msgspec.Raw}


class TestCPathTables:
    def test_kept_top_level_keys_are_the_records_fields(self) -> None:
        kept = _string_array(_header(), "KEPT_TOP_LEVEL_KEYS")
        names = set(strict_schema.StrictRecord.__struct_encode_fields__)
        for name in set(kept) - names:
            pytest.fail(f"{HEADER.name} KEPT_TOP_LEVEL_KEYS has {name!r}, which StrictRecord does not read")
        for name in names - set(kept):
            pytest.fail(f"StrictRecord reads {name!r}, missing from {HEADER.name} KEPT_TOP_LEVEL_KEYS")

    def test_every_member_key_is_a_contract_field_where_it_is_read(self) -> None:
        where = {
            "RECORD_TOP": set(strict_schema.StrictRecord.__struct_encode_fields__),
            "RECORD_TRAJECTORY": set(models.TrajectoryRecord.model_fields),
            "RECORD_CALL": set(models.TrajectoryModelCall.model_fields),
            "RECORD_RESPONSE": set(strict_schema.StrictResponseUsage.__struct_fields__),
            "RECORD_INVOCATION": set(models.AgentInvocation.model_fields),
            "RECORD_TURN": set(models.TrajectoryTurn.model_fields),
            "RECORD_TOOL_CALL": set(models.TrajectoryToolCall.model_fields),
        }
        keys = _member_keys(_header())
        assert set(keys) == set(where), (
            f"{HEADER.name} reads objects {sorted(keys)}, this check knows {sorted(where)}"
        )
        for obj, names in keys.items():
            for name in names - where[obj]:
                pytest.fail(f"{HEADER.name} {obj} reads {name!r}, not a field of the contract there")

    def test_the_raw_members_are_the_mirrors_raw_fields(self) -> None:
        """What the C copy keeps raw (payloads, unread free values) is what the mirror decodes
        as ``Raw``: a payload added to the contract and the mirror must be cut in C too."""
        keys = _member_keys(_header())
        assert keys["RECORD_CALL"] == _raw_fields(strict_schema.StrictModelCall)
        assert keys["RECORD_TURN"] == _raw_fields(strict_schema.StrictTurn)
        assert keys["RECORD_TOOL_CALL"] == _raw_fields(strict_schema.StrictToolCall)

    def test_text_keys_are_free_text_fields_of_the_conversation(self) -> None:
        conversation = [
            value
            for module in (_messages, _parts, _tool_items, _training)
            for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, BaseModel)
        ]
        fields = _fields(*conversation) | set().union(
            *(set(struct.__struct_fields__) for struct, _, _ in _EVERYDAY)
        )
        for name in _string_array(_header(), "TEXT_KEYS"):
            assert name in fields, f"{HEADER.name} TEXT_KEYS has {name!r}, no conversation field of that name"
