"""Generate docs/spec-reference.md from the spec models (the one source of truth).

`python -m pdctl.docgen docs/spec-reference.md` rewrites it; a test fails when it is stale.
The Markdown table writer here (`cell`, `table`, `main`) also writes docs/cli-reference.md
(pdctl.cli.reference)."""

from __future__ import annotations

import sys
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from pdctl.spec.model import Spec
from pdctl.spec.walk import Wording, models, section, type_words

# Types as the reference's table writes them: Literal values as JSON, sections as links.
WORDING = Wording(
    either=" \\| ", optional=" (optional)", mapping="map",
    literal=lambda args: " \\| ".join(f"`{a!r}`".replace("'", '"') for a in args),
    section=lambda name: f"[{name}](#{name.lower()})")


def cell(text: str) -> str:
    """Text for one Markdown table cell: on one line, `|` escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    """A Markdown table (cells as given: escape them with `cell`)."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "**required**"
    if field.default_factory is not None:
        return "(section defaults)"
    value = field.default
    if value is None or value is PydanticUndefined:
        return "—"
    if value == () or value == {}:
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def reference() -> str:
    lines = [
        "# Spec reference", "",
        "<!-- Generated from pdctl/spec/*.py by `python -m pdctl.docgen docs/spec-reference.md`;",
        "     do not edit by hand (a test fails when this file is stale). -->", "",
        'Keys are camelCase. Unknown keys are errors (with a "did you mean"). The JSON Schema of',
        "the same models: `pdctl schema`.", "",
    ]
    for model in models(Spec):
        doc = (model.__doc__ or "").strip().splitlines()[0]
        rows = []
        for name, field in model.model_fields.items():
            key = field.alias or name
            desc = field.description or " ".join(
                (m.__doc__ or "").strip().splitlines()[0]
                for m in filter(None, [section(field.annotation)])
            )
            desc = desc.replace("|", "\\|").replace("\n", " ")
            rows.append([f"`{key}`", type_words(field.annotation, WORDING), _default(field), desc])
        lines += [f"## {model.__name__}", "", doc, ""]
        lines += table(["key", "type", "default", "meaning"], rows)
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str], make: Any = None) -> None:
    """Write what `make` (default: the spec reference) returns to argv[1], else stdout."""
    text = (make or reference)()
    if len(argv) > 1:
        with open(argv[1], "w", encoding="utf-8") as fh:
            fh.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main(sys.argv)
