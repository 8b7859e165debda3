"""The capacity tables shipped as data (pdctl/data/models.yaml, gpus.yaml): read and checked
once, when the module that holds the table is first imported.

Each entry is checked against a pydantic schema; a malformed one is refused with one line that
names the file and the entry (`pdctl/data/gpus.yaml: gpus.H200: bandwidth_gbs: ...`).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from pdctl.errors import PdctlError
from pdctl.spec.load import plugins_off

Schema = TypeVar("Schema", bound=BaseModel)
_SAFE = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's when PyYAML has it: 7x faster


class TableError(PdctlError):
    """A data table pdctl ships (or a test gives) is malformed: a bug in pdctl, not the spec."""


def read(name: str, path: Path | None = None) -> tuple[str, dict[str, Any]]:
    """(where, document) of pdctl/data/`name`, or of `path` when given (tests)."""
    where = str(path) if path else f"pdctl/data/{name}"
    file = path or resources.files("pdctl").joinpath("data").joinpath(name)
    try:
        doc = yaml.load(file.read_text(), Loader=_SAFE)  # noqa: S506 (a safe loader)
    except yaml.YAMLError as exc:
        raise TableError(f"{where}: not valid YAML: {' '.join(str(exc).split())}") from None
    if not isinstance(doc, dict):
        raise TableError(f"{where}: a mapping of sections expected")
    return where, doc


def section(where: str, doc: dict[str, Any], name: str) -> dict[str, Any]:
    """The mapping `name` of the document, its keys strings."""
    return mapping(where, name, doc.get(name))


def mapping(where: str, entry: str, values: Any) -> dict[str, Any]:
    """`values`, a mapping with string keys; else a TableError naming the file and the entry."""
    if not isinstance(values, dict) or not all(isinstance(k, str) for k in values):
        raise TableError(f"{where}: {entry}: a mapping of names expected, got {values!r}")
    return values


def check(where: str, entry: str, values: Any, schema: type[Schema]) -> Schema:
    """`values` validated by `schema`; else a TableError naming the file and the entry."""
    mapping(where, entry, values)
    # The schemas defer their build to here, where pydantic's plugins are off: looking for
    # them reads every installed package's entry points (as pdctl.inputs.read_spec avoids).
    try:
        with plugins_off():
            return schema.model_validate(values)
    except ValidationError as exc:
        errors = exc.errors()
        field = errors[0]["loc"][0] if errors[0]["loc"] else ""
        # the last error of the field: an int-or-float field says "a valid number"
        what = [e for e in errors if e["loc"][:1] == errors[0]["loc"][:1]][-1]["msg"]
        got = f" (got {values[field]!r})" if field in values else ""
        raise TableError(f"{where}: {entry}: {field}: {what}{got}") from None


def refer(where: str, entry: str, name: str, known: dict[str, Any]) -> Any:
    """The entry `name` of `known`, which `entry` refers to."""
    if not isinstance(name, str) or name not in known:
        raise TableError(f"{where}: {entry}: {name!r} is not in the table")
    return known[name]
