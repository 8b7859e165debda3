"""The base model every spec section uses: camelCase keys, unknown keys rejected, frozen."""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, field_validator
from pydantic.alias_generators import to_camel

# Patterns are used with fullmatch: `$` would also accept one trailing newline ("a\n").
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
QUANTITY = re.compile(r"[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
# Control characters (newline, tab, NUL, ESC, C1 controls, ...) have no place in any spec
# value: a newline would end a comment line in a rendered script and start a command. Nor do
# the characters that reorder or break a line as a terminal or editor shows it: the bidi
# marks, embeddings, overrides and isolates (an `rm` that reads as `mr`) and the Unicode line
# and paragraph separators.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
# The longest string any spec field takes; fields of a narrower kind have their own bound
# (DNS labels 63, model names 1,024, image references 512: docs/spec.md lists them).
MAX_TEXT = 4096


class Section(BaseModel):
    """A spec section: YAML keys are camelCase, unknown keys are errors, values are frozen."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=False,
        # Build validators once, for the whole Spec, when the first spec is validated (not once
        # per section class at import and again inside Spec): about half the start-up cost.
        defer_build=True,
        # `.inf`, `.nan` and `1e999` are floats in YAML; no field means them.
        allow_inf_nan=False,
    )

    @field_validator("*", mode="after")
    @classmethod
    def _no_control_characters(cls, value: Any) -> Any:
        _check_text(value)
        return value


def _check_text(value: Any) -> None:
    """Reject control and bidi characters and overlong text in any string, also inside lists
    and mappings (keys too)."""
    if isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise ValueError(f"is {len(value):,} characters long, more than {MAX_TEXT:,}")
        bad = CONTROL.search(value)
        if bad:
            shown = value if len(value) <= 60 else value[:55] + "..."
            raise ValueError(
                f"{shown!r} holds the control character U+{ord(bad.group()):04X}; write it on "
                "one line, without tabs, newlines or direction marks"
            )
    elif isinstance(value, (tuple, list)):
        for item in value:
            _check_text(item)
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_text(key)
            _check_text(item)


def _dns_label(value: str) -> str:
    if len(value) > 63 or not DNS1123_LABEL.fullmatch(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label: use at most 63 lower-case letters, digits and "
            "'-', starting and ending with a letter or digit"
        )
    return value


def _env_name(value: str) -> str:
    if not ENV_NAME.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an environment variable name: use letters, digits and '_', "
            "not starting with a digit"
        )
    return value


def _quantity(value: str) -> str:
    if not QUANTITY.fullmatch(str(value)):
        raise ValueError(
            f"{value!r} is not a Kubernetes quantity: write e.g. '8', '500m', '16Gi' or '64G'"
        )
    return str(value)


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
EnvName = Annotated[str, AfterValidator(_env_name)]


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
