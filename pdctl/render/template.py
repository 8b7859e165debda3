"""The Jinja2 environment for scripts: strict, shell-quoting filters, compiled once."""

from __future__ import annotations

import shlex
from functools import cache
from importlib import resources
from pathlib import Path

import jinja2


def quote(value: object) -> str:
    """Quote any value for POSIX sh."""
    return shlex.quote(str(value))


def quote_path(value: str) -> str:
    """Quote a path for sh, keeping a leading `~/` as "$HOME" (which quoting would disable)."""
    if value == "~":
        return '"$HOME"'
    if value.startswith("~/"):
        rest = value[2:]
        return '"$HOME"/' + shlex.quote(rest) if rest else '"$HOME"'
    return shlex.quote(value)


def quote_join(values: object) -> str:
    return " ".join(quote(v) for v in values)  # type: ignore[attr-defined]


def templates_dir() -> Path:
    packaged = resources.files("pdctl").joinpath("templates")
    if packaged.is_dir():
        return Path(str(packaged))
    return Path(__file__).resolve().parents[2] / "templates"


@cache
def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())), undefined=jinja2.StrictUndefined,
        autoescape=False, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        # Templates ship with pdctl and never change while it runs: skip the stat() per
        # get_template/include that checks for edits (4,700 calls for 1,000 instances).
        auto_reload=False,
    )
    env.filters["q"] = quote
    env.filters["qpath"] = quote_path
    env.filters["qjoin"] = quote_join
    return env


def render_template(name: str, **values: object) -> str:
    return environment().get_template(name).render(**values)
