"""One walker of the spec models, for everything that reads them by path: docgen
(docs/spec-reference.md), `pdctl explain`, and spec/load.py locating a validation error and
the keys allowed where it is. A field's section model is the model inside its annotation
(itself, optional, a list or tuple of it)."""

from __future__ import annotations

import typing
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo


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
