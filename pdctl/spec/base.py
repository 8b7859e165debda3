"""The base model every spec section uses: camelCase keys, unknown keys rejected, frozen."""

import re
import types
import typing
from collections.abc import Iterator
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
)
from pydantic.alias_generators import to_camel
from pydantic_core import PydanticCustomError

from pdctl.spec.walk import field_of, section

# Patterns are used with fullmatch: `$` would also accept one trailing newline ("a\n").
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
# What a `Field(pattern=...)` value is, and how to write one: the error line says this instead
# of pydantic's "String should match pattern '...'" (spec/load.py reads it). Register a pattern
# with `pattern(regex, what, fix)` where the field declares it; the JSON Schema keeps the regex.
PATTERNS: dict[str, tuple[str, str]] = {}


def pattern(regex: str, what: str, fix: str) -> str:
    """`regex`, registered with what a matching value is and the fix for one that is not."""
    PATTERNS[regex] = (what, fix)
    return regex


class Section(BaseModel):
    """A spec section: YAML keys are camelCase, unknown keys are errors, values are frozen."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True,
        use_attribute_docstrings=False,
        # Build validators once, for the whole Spec, when the first spec is validated (not once
        # per section class at import and again inside Spec): about half the start-up cost.
        defer_build=True,
        # `.inf`, `.nan` and `1e999` are floats in YAML; no field means them.
        allow_inf_nan=False,
    )


def defaults(**field: Any) -> Any:
    """A field holding a whole section, by default the section with its own defaults: the
    empty mapping, validated by the enclosing model's validator. A `default_factory` of the
    section class would build that class's own validator the first time a spec leaves the
    section out (2-20 ms of a cold start each; docs/performance.md)."""
    return Field(default_factory=dict, validate_default=True, **field)


def refuse(what: str, fix: str) -> PydanticCustomError:
    """A validator's error with its fix: raise it where a ValueError would say only what."""
    return PydanticCustomError("spec_value", "{what}", {"what": what, "fix": fix})


def _number_kind(annotation: Any, item: bool) -> str | None:
    """'a whole number' / 'a number' when the annotation (its items for `item`) takes a
    number and no boolean, else None."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _number_kind(typing.get_args(annotation)[0], item)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(annotation)
        if bool in args:
            return None
        kinds = {_number_kind(a, item) for a in args if a is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    if item:
        if origin in (tuple, list):
            items = [a for a in typing.get_args(annotation) if a is not Ellipsis]
            return _number_kind(items[0], False) if len(items) == 1 else None
        return None
    if origin is typing.Literal:
        args = typing.get_args(annotation)
        numbers = all(isinstance(a, int) and not isinstance(a, bool) for a in args)
        return "one of " + ", ".join(map(str, args)) if numbers else None
    if annotation is int:
        return "a whole number"
    if annotation is float:
        return "a number"
    return None


def booleans_for_numbers(
    data: Any, model: type[BaseModel], loc: tuple[str | int, ...] = ()
) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """(location, message) of each YAML boolean in `data` where `model` takes a number.
    YAML reads yes/no/on/off/true/false as booleans, and pydantic would take them as 1 and 0
    for a number field (`replicas: yes`); the JSON Schema says integer or number, so an editor
    refuses them too. Ints stay accepted for floats. spec/load.py asks this before pydantic
    (one walk of the data instead of a validator on each of the spec's 400 fields)."""
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        found = field_of(model, key)
        if found is None:
            continue  # pydantic reports the unknown key
        annotation = found[1].annotation
        inner = section(annotation)
        if inner is not None:
            if isinstance(value, list):
                for i, item in enumerate(value):
                    yield from booleans_for_numbers(item, inner, loc + (key, i))
            else:
                yield from booleans_for_numbers(value, inner, loc + (key,))
            continue
        if isinstance(value, bool):
            index = None
        elif isinstance(value, list):
            index = next((i for i, v in enumerate(value) if isinstance(v, bool)), None)
            if index is None:
                continue
        else:
            continue
        what = _number_kind(annotation, index is not None)
        if what is not None:
            got = str(value if index is None else value[index]).lower()
            where = "" if index is None else f"entry {index} "
            yield loc + (key,), f"{where}must be {what} (got a boolean ({got}))"


def matching(regex: re.Pattern[str], what: str, limit: int = 0) -> AfterValidator:
    """A validator of a text that `regex` matches whole (at most `limit` long, if given);
    else the error is `'<value>' <what>`."""

    def check(value: str) -> str:
        if (limit and len(value) > limit) or not regex.fullmatch(value):
            raise ValueError(f"{value!r} {what}")
        return value

    return AfterValidator(check)


def _quantity(value: str) -> str:
    if not QUANTITY.fullmatch(str(value)):
        raise ValueError(
            f"{value!r} is not a Kubernetes quantity: write e.g. '8', '500m', '16Gi' or '64G'"
        )
    return str(value)


DnsLabel = Annotated[str, matching(
    DNS1123_LABEL, "is not a DNS-1123 label: use at most 63 lower-case letters, digits and "
    "'-', starting and ending with a letter or digit", 63)]
EnvName = Annotated[str, matching(
    ENV_NAME, "is not an environment variable name: use letters, digits and '_', "
    "not starting with a digit")]


def _number_to_text(value: Any) -> Any:
    """`cpu: 8` or `memory: 0.5` in YAML are numbers; Kubernetes takes them as quantities."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) or (isinstance(value, float) and value == value):
        return format(value, "g") if isinstance(value, float) else str(value)
    return value


def _size(value: str) -> str:
    if not re.search(r"[kMGTPE]i?$", value):
        raise ValueError(
            f"{value!r} has no unit, so Kubernetes reads it as bytes: write e.g. '16Gi' or '64G'"
        )
    return value


Quantity = Annotated[str, BeforeValidator(_number_to_text), AfterValidator(_quantity)]
# A memory or disk size: a quantity with a unit (a bare `8` would be 8 bytes).
Size = Annotated[Quantity, AfterValidator(_size)]
