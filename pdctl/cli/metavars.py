"""How arguments and option values read in `--help`: SPEC, DIR, INTEGER, as click and most
CLIs write them, instead of typer's `{spec}`, `<list[str]>` and `<int range>`.

`polish(command)` walks the click command tree typer built: an argument shows its name in
capitals (`SPEC`, `[UNIT]` when optional); an option without its own metavar gets one from
its type (TEXT, INTEGER, FLOAT, PATH)."""

from __future__ import annotations

from typing import Any

from typer.core import TyperArgument

_TYPES = {int: "INTEGER", float: "FLOAT", str: "TEXT", bool: "BOOLEAN"}


class PlainArgument(TyperArgument):
    """An argument whose help row and usage read SPEC or [UNIT]."""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


def type_metavar(param: Any) -> str:
    """INTEGER, FLOAT, TEXT or PATH for an option's value type (a list's element type)."""
    desc = param.type_descriptor
    if desc.is_path:
        return "PATH"
    if desc.is_choice and desc.choices:
        return "|".join(str(getattr(c, "value", c)) for c in desc.choices)
    annotation = desc.annotation
    for arg in getattr(annotation, "__args__", ()) or ():
        if arg is not type(None):
            annotation = arg
            break
    element = getattr(annotation, "__args__", None)
    if element and getattr(annotation, "__origin__", None) is list:
        annotation = element[0]
    return _TYPES.get(annotation, "TEXT")


def polish(command: Any) -> Any:
    """Set the metavars of `command` and every subcommand (in place); returns it."""
    for param in command.params:
        if isinstance(param, TyperArgument):
            param.metavar = (param.metavar or param.name or "").upper()
            param.__class__ = PlainArgument
        elif param.metavar is None and not getattr(param, "is_flag", False):
            if hasattr(param, "type_descriptor"):
                param.metavar = type_metavar(param)
    for sub in getattr(command, "commands", {}).values():
        polish(sub)
    return command
