"""Generate docs/cli-reference.md from the typer app: every command, argument and option with
its type, default and environment variable (the same source as `--help`).

`python -m pdctl.cli.reference docs/cli-reference.md` rewrites it; a test fails when it is
stale, so an option that drifts between commands shows up in review. The table writer is
pdctl.docgen's (the spec reference's)."""

from __future__ import annotations

import sys
import types
import typing
from typing import Any

from pdctl.cli.app import command
from pdctl.docgen import cell, table

HEADER = [
    "# CLI reference", "",
    "<!-- Generated from pdctl/cli/*.py by `python -m pdctl.cli.reference docs/cli-reference.md`;",
    "     do not edit by hand (a test fails when this file is stale). -->", "",
    "Every command, argument and option of `pdctl` as `--help` shows them. The connection",
    "options (SSH, Docker, Kubernetes) are declared once (`pdctl/cli/connect.py`) and are the",
    "same on every command that connects.", ""]


def _default(param: Any) -> str:
    if param.required:
        return "**required**"
    value = param.default
    if callable(value) or value is None or value in ((), [], ""):
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def _type(param: Any) -> str:
    if getattr(param, "is_flag", False):
        return "flag"
    limits = (("≥", getattr(param, "min", None)), ("≤", getattr(param, "max", None)))
    bounds = "".join(f" {sign} {value}" for sign, value in limits if value is not None)
    repeat = ", repeatable" if param.multiple else ""
    if param.param_type_name == "option" and param.metavar:  # FORMAT, DIR, INTEGER (--help's)
        return param.metavar + bounds + repeat
    ann = param.type_descriptor.annotation
    args = [a for a in typing.get_args(ann) if a is not type(None)]
    if typing.get_origin(ann) in (typing.Union, types.UnionType) and len(args) == 1:
        ann = args[0]
    if typing.get_origin(ann) is list:
        ann = typing.get_args(ann)[0]
    return getattr(ann, "__name__", str(ann)).lower() + bounds + repeat


def _names(param: Any) -> str:
    if param.param_type_name == "argument":
        return f"`{(param.metavar or param.name).upper()}`"
    return ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])


def command_section(name: str, cmd: Any) -> list[str]:
    lines = [f"## pdctl {name}", ""]
    lines += [" ".join((cmd.help or "").split()), ""]
    args = [p for p in cmd.params if p.param_type_name == "argument"]
    usage = " ".join(
        f"{(p.metavar or p.name).upper()}" if p.required else f"[{(p.metavar or p.name).upper()}]"
        for p in args)
    lines += [f"`pdctl {name} [OPTIONS]{' ' + usage if usage else ''}`", ""]
    shown = [p for p in cmd.params if not getattr(p, "hidden", False)]
    if shown:
        rows = []
        for p in shown:
            env = p.envvar if isinstance(p.envvar, str) else ", ".join(p.envvar or [])
            rows.append([_names(p), _type(p), _default(p), f"`{env}`" if env else "—",
                         cell(getattr(p, "help", "") or "")])
        lines += table(["argument / option", "type", "default", "env", "meaning"], rows)
        lines.append("")
    return lines


def reference() -> str:
    root = command()
    lines = list(HEADER)
    lines += ["Global options (before the command):", ""]
    for p in root.params:
        if p.name != "help":
            lines.append(f"- {_names(p)}: {cell(getattr(p, 'help', '') or '')}")
    lines.append("")
    for name, cmd in root.commands.items():  # type: ignore[attr-defined]
        lines += command_section(name, cmd)
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    from pdctl.docgen import main

    main(sys.argv, reference)
