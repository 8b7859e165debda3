"""What `pdctl explain FIELD` prints: one spec field as `kubectl explain` shows one: type,
default, allowed values, description, an example and, for a section, its fields. All of it
from the spec's pydantic models (through pdctl/spec/walk.py, the walker docgen and the spec's
error locations use too); the example is the value a `pdctl init` spec gives the field, else its
default, an example it documents, or a value inside its bounds."""

from __future__ import annotations

import difflib
import functools
import json
import re
import textwrap
import types
import typing
from typing import Annotated, Any

import yaml
from pydantic import TypeAdapter, ValidationError
from pydantic_core import PydanticUndefined

from pdctl.errors import UsageError
from pdctl.render.template import templates_dir
from pdctl.spec import walk
from pdctl.spec.model import Spec
from pdctl.spec.source import parse

WIDTH = 76
# One part of a field path: a name, a list entry written [0] or [] after it.
PART = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\[[0-9]*\])?")
# Types in words: a Literal by its values' types (the values are listed as ALLOWED).
LITERAL_WORDS = {str: "string", int: "integer", bool: "boolean"}
WORDING = walk.Wording(
    either=" or ", optional=", optional", mapping="mapping",
    literal=lambda args: " or ".join(
        dict.fromkeys(LITERAL_WORDS.get(type(a), "value") for a in args)),
    section=lambda name: f"section ({name})",
    names={bool: "boolean", int: "integer", float: "number", str: "string"})


def explain_text(path: str) -> str:
    written = path.strip().split(".") if path.strip() else []
    for part in written:
        if not PART.fullmatch(part):
            from pdctl.errors import UsageError

            raise UsageError(
                f"explain {path}: {part!r} is not a field name",
                fix="write field names joined by '.', a list entry as [0] or [], "
                "e.g. hosts[0].gpus",
            )
    parts = [p.split("[", 1)[0] for p in written]
    model: Any = Spec
    field: Any = None
    names: list[str] = []
    for part in parts:
        found = walk.field_of(model, part, loose=True) if model is not None else None
        if found is None:
            raise _unknown(path, names, part)
        name, field = found
        names.append(name)
        model = walk.section(field.annotation)
    return _describe(".".join(names) or "spec", field, model, names)


def _describe(title: str, field: Any, model: Any, names: list[str]) -> str:
    out = [f"FIELD:    {title}"]
    if field is not None:
        kind, allowed = _type(field.annotation)
        out.append(f"TYPE:     {kind}")
        out.append(f"DEFAULT:  {_default(field)}")
        if allowed:
            out.append("ALLOWED:  " + ", ".join(allowed))
        bounds = _bounds(field.metadata)
        if bounds:
            out.append(f"RANGE:    {bounds}")
    text = [field.description] if field is not None and field.description else []
    if model is not None and model.__doc__ and not text:  # the field's own words come first
        text.append(" ".join(model.__doc__.split()))
    if text:
        out += ["", "DESCRIPTION:"] + [_wrap(t) for t in text]
    example = _example(names, field, model)
    if example:
        out += ["", "EXAMPLE:", textwrap.indent(example.rstrip("\n"), "    ")]
    if model is not None:
        out += ["", "FIELDS:"] + _children(model)
    return "\n".join(out)


def _wrap(text: str) -> str:
    return textwrap.fill(text, WIDTH, initial_indent="    ", subsequent_indent="    ")


def _type(annotation: Any) -> tuple[str, list[str]]:
    """A type in words, and the allowed values of a Literal."""
    return walk.type_words(annotation, WORDING), [_scalar(a) for a in _literals(annotation)]


def _literals(annotation: Any) -> list[Any]:
    """A Literal's values, through Annotated and unions (not inside a list or mapping)."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return list(args)
    if origin in (typing.Annotated, typing.Union, types.UnionType):
        return [v for a in args for v in _literals(a)]
    return []


def _scalar(value: Any) -> str:
    return json.dumps(value) if isinstance(value, str) and value != value.strip() else str(value)


def _default(field: Any) -> str:
    if field.default_factory is not None:
        if walk.section(field.annotation) is not None:
            return "the section's own defaults (below)"
        return _yaml_value(field.default_factory())
    if field.default is PydanticUndefined:
        return "none: required"
    if field.default is None:
        return "none (unset)"
    return _yaml_value(field.default)


def _yaml_value(value: Any) -> str:
    if isinstance(value, tuple):
        value = list(value)
    text = yaml.safe_dump(value, default_flow_style=True, width=200, sort_keys=False)
    return text.strip().removesuffix("...").strip()


def _bounds(metadata: list[Any]) -> str:
    low = high = ""
    for m in metadata:
        for attr, sign in (("ge", ">="), ("gt", ">")):
            if getattr(m, attr, None) is not None:
                low = f"{sign} {getattr(m, attr)}"
        for attr, sign in (("le", "<="), ("lt", "<")):
            if getattr(m, attr, None) is not None:
                high = f"{sign} {getattr(m, attr)}"
        if getattr(m, "min_length", None):
            low = f"at least {m.min_length} long"
    return ", ".join(b for b in (low, high) if b)


def _children(model: Any) -> list[str]:
    rows = []
    for name, field in model.model_fields.items():
        kind = _type(field.annotation)[0].replace(", optional", "")
        need = " (required)" if field.is_required() else ""
        rows.append((field.alias or name, f"<{kind}>{need}", _first_sentence(field.description)))
    width = max(len(r[0]) for r in rows)
    out = []
    for alias, kind, what in rows:
        out.append(f"    {alias.ljust(width)}  {kind}")
        if what:
            out.append(f"    {' ' * width}  {what}")
    return out


# A sentence ends at '.' and a space before a capital or code; not the '.' of an abbreviation
# ("GPU type, e.g. `H100`", "i.e.", "etc.", "vs.").
SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)\.\s+(?=[A-Z`])")


def _first_sentence(text: str | None) -> str:
    text = " ".join((text or "").split())
    end = SENTENCE_END.search(text)
    text = text if end is None else text[: end.start() + 1]
    return text if len(text) <= WIDTH else text[: WIDTH - 3] + "..."


def _example(names: list[str], field: Any, model: Any) -> str:
    """YAML setting the field: the value a `pdctl init` spec gives it, else `_made_up`'s."""
    if not names:
        return ""
    value = _from_init(names)
    if value is None and model is None and field is not None:
        value = _made_up(field)
    if value is None:
        return ""
    return _nest(names, value)


def _from_init(names: list[str]) -> Any:
    for data in _init_specs():
        node: Any = data
        for name in names:
            if isinstance(node, list):
                node = node[0] if node else None
            node = node.get(name) if isinstance(node, dict) else None
        if node is not None:
            return node
    return None


@functools.cache
def _init_specs() -> list[Any]:
    """The specs `pdctl init` writes, phases 0 to 3, as data."""
    out = []
    for phase in range(4):
        try:
            out.append(parse((templates_dir() / f"init-phase{phase}.yaml").read_text(), "init")[0])
        except (OSError, ValueError):
            continue
    return out


def _made_up(field: Any) -> Any:
    """A realistic value for the field: its default, else its first allowed value, else an
    example it documents (`examples=` or an "e.g." in its description), else a value inside
    its bounds (0.9 for a fraction, not the bound itself)."""
    kind, allowed = _type(field.annotation)
    if field.default not in (None, PydanticUndefined, (), {}):
        return field.default
    if allowed:
        literal = typing.get_args(field.annotation)
        return next((a for a in _literals(field.annotation) if a is not None), literal[0])
    for example in [*(field.examples or []), *_described(field.description)]:
        if _fits(field, example):
            return example
    return _inside(field, kind.split(",")[0])


# "e.g. 143771" in a description: the value after it, without quotes or backticks.
EXAMPLE = re.compile(r"\be\.g\.,?\s+([^\s,;()]+)")


def _described(text: str | None) -> list[Any]:
    out = []
    for match in EXAMPLE.finditer(text or ""):
        word = match.group(1).strip("`'\"").rstrip(".:")
        try:
            out.append(yaml.safe_load(word))
        except yaml.YAMLError:
            continue
    return out


def _fits(field: Any, value: Any) -> bool:
    """Whether the field takes the value (its type, bounds and checks)."""
    if value is None or (isinstance(value, str) and value == ""):
        return False
    try:
        checked = field.annotation
        if field.metadata:
            parts = (checked, *field.metadata)
            checked = Annotated[parts]  # type: ignore[valid-type]
        TypeAdapter(checked).validate_python(value)
    except (ValidationError, ValueError, TypeError):
        return False
    return True


def _inside(field: Any, kind: str) -> Any:
    """A value inside the field's bounds, not on one: a fraction's 0.9, else the first of a
    few round values that fits (the lower bound only when none does)."""
    if kind == "boolean":
        return True
    if kind not in ("integer", "number"):
        return None
    bounds = [getattr(m, a) for m in field.metadata for a in ("ge", "gt", "le", "lt")
              if getattr(m, a, None) is not None]
    candidates: list[Any] = [2, 4, 8, 16, 64, 256, 1024, 8192]
    if kind == "number":
        candidates = [0.9, 1.0, 10.0, 100.0] if max(bounds, default=2) <= 1 else [1.0, 10.0]
    for value in candidates:
        if value not in bounds and _fits(field, value):
            return value
    for m in field.metadata:
        for attr in ("ge", "gt"):
            bound = getattr(m, attr, None)
            if bound is not None:
                return bound if attr == "ge" else bound + 1
    return candidates[0]


def _nest(names: list[str], value: Any) -> str:
    """YAML that sets names[-1] to value, the sections around it written out (a list on
    the way, such as hosts, as a list of one entry)."""
    lines = []
    indent = ""
    for name, is_list in zip(names[:-1], _list_parts(names), strict=False):
        lines.append(f"{indent}{name}:")
        indent += "  - " if is_list else "  "
    leaf = f"{indent}{names[-1]}:"
    if isinstance(value, dict) and value:
        block = _block(value)
        lines += [leaf] + textwrap.indent(block, " " * len(indent) + "  ").splitlines()
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        lines += [leaf] + [f"{indent}  - {_yaml_value(item)}" for item in value]
    else:
        lines.append(f"{leaf} {_yaml_value(value)}")
    # Only the first line after a list marker keeps the "- ".
    return "\n".join(_one_marker(lines)) + "\n"


def _block(value: dict) -> str:
    """A mapping one key a line, each value in flow style."""
    return "".join(f"{key}: {_yaml_value(item)}\n" for key, item in value.items())


def _one_marker(lines: list[str]) -> list[str]:
    out = []
    seen: set[int] = set()
    for line in lines:
        at = line.find("- ")
        if at >= 0 and line[:at].strip() == "":
            if at in seen:
                line = line[:at] + "  " + line[at + 2 :]
            seen.add(at)
        out.append(line)
    return out


def _list_parts(names: list[str]) -> list[bool]:
    """For each name, whether the field holds a list of sections (so the next name is inside
    one entry of it)."""
    out = []
    model: Any = Spec
    for i, name in enumerate(names):
        found = walk.field_of(model, name, loose=True) if model is not None else None
        annotation = found[1].annotation if found else None
        origin = typing.get_origin(annotation)
        out.append(origin in (tuple, list) and i < len(names) - 1)
        model = walk.section(annotation) if annotation is not None else None
    return out


def _unknown(path: str, names: list[str], part: str) -> Exception:
    paths = walk.paths(Spec)
    wanted = ".".join([*names, part])
    level = [p for p in paths if p.count(".") == wanted.count(".")]  # siblings first
    close = difflib.get_close_matches(wanted, level, n=3, cutoff=0.6)
    close = close or difflib.get_close_matches(wanted, paths, n=3, cutoff=0.6)
    if not close:  # the last name alone, wherever it is
        by_leaf: dict[str, list[str]] = {}
        for p in paths:
            by_leaf.setdefault(p.rsplit(".", 1)[-1].lower(), []).append(p)
        for leaf in difflib.get_close_matches(part.lower(), list(by_leaf), n=2, cutoff=0.7):
            close += by_leaf[leaf][:3]
    fix = ("did you mean " + ", ".join(close[:3]) + "?") if close else "see `pdctl explain`"
    where = f" in {'.'.join(names)}" if names else ""
    return UsageError(f"explain {path}: no field {part!r}{where}", fix=fix)
