"""One walker of the spec models, for everything that reads them by path: docgen
(docs/spec-reference.md), `pdctl explain`, and spec/load.py locating a validation error and
the keys allowed where it is. A field's section model is the model inside its annotation
(itself, optional, a list or tuple of it). `type_words` writes a field's type, in the wording
docgen or explain gives it."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo

NONE = type(None)


@dataclasses.dataclass(frozen=True)
class Wording:
    """How one document writes types: a union's joiner and its optional mark, a Literal's
    values, a section model (from its name), a mapping, and the names of plain types."""

    either: str
    optional: str
    literal: Callable[[tuple[Any, ...]], str]
    section: Callable[[str], str]
    mapping: str
    names: dict[Any, str] = dataclasses.field(default_factory=dict)


def type_words(annotation: Any, wording: Wording) -> str:
    """A field's type in words (through Annotated, unions, Literal, list, tuple and dict)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_words(args[0], wording)
    if origin is typing.Literal:
        return wording.literal(args)
    if origin in (typing.Union, types.UnionType):
        kinds = dict.fromkeys(type_words(a, wording) for a in args if a is not NONE)
        return wording.either.join(kinds) + (wording.optional if NONE in args else "")
    if origin in (tuple, list):
        return f"list of {type_words(args[0], wording)}" if args else "list"
    if origin is dict:
        key, value = (type_words(a, wording) for a in args)
        return f"{wording.mapping} of {key} to {value}"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return wording.section(annotation.__name__)
    return wording.names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def section(annotation: Any) -> type[BaseModel] | None:
    """The model a field holds, if any (Optional[M], list[M], tuple[M, ...], Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = section(arg)
        if found is not None:
            return found
    return None


def field_of(model: type[BaseModel], key: str, loose: bool = False) -> tuple[str, FieldInfo] | None:
    """(YAML key, field) of `key` in `model`: its camelCase alias or Python name; `loose`: in
    any letter case too (`pdctl explain`)."""
    for name, field in model.model_fields.items():
        alias = field.alias or name
        if key in (alias, name) or (loose and key.lower() == alias.lower()):
            return alias, field
    return None


def model_at(path: Iterable[str | int], root: type[BaseModel]) -> Any:
    """The model at a YAML path (list indexes skipped) from `root` (the Spec), or None."""
    model: type[BaseModel] | None = root
    for part in path:
        if isinstance(part, int):
            continue
        found = field_of(model, part) if model is not None else None
        if found is None:
            return None
        model = section(found[1].annotation)
    return model


def models(root: type[BaseModel]) -> list[type[BaseModel]]:
    """`root` and every model below it, each once, depth first in field order."""
    seen: list[type[BaseModel]] = []

    def visit(model: type[BaseModel]) -> None:
        if model in seen:
            return
        seen.append(model)
        for field in model.model_fields.values():
            inner = section(field.annotation)
            if inner is not None:
                visit(inner)

    visit(root)
    return seen


def paths(model: type[BaseModel], prefix: str = "", depth: int = 6) -> list[str]:
    """Every field's dotted YAML path below `model`, `depth` sections deep."""
    out = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{field.alias or name}"
        out.append(path)
        inner = section(field.annotation)
        if inner is not None and depth > 0:
            out += paths(inner, path + ".", depth - 1)
    return out
