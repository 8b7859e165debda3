"""Every rich Console pdctl prints through: styling only where a user wants it.

`NO_COLOR` (any non-empty value, https://no-color.org) and `TERM=dumb` turn off every ANSI
escape, bold and italic included (rich's own NO_COLOR handling drops colours but keeps bold).
A table printed to a pipe or a file is as wide as `COLUMNS` says, else `piped_width`."""

from __future__ import annotations

import os
import sys
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console


def plain() -> bool:
    """Whether the environment asks for no styling at all."""
    return os.environ.get("NO_COLOR", "") != "" or os.environ.get("TERM", "") == "dumb"


def width(stream: IO[str], piped_width: int | None) -> int | None:
    """The width for a console on `stream`: a terminal's own (None), else COLUMNS, else
    piped_width (None: rich's default of 80)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if stream.isatty():
            return None
    except (AttributeError, ValueError):
        pass
    return piped_width


def console(stderr: bool = False, piped_width: int | None = None, **kwargs: Any) -> Console:
    """A rich Console on stdout (or stderr): no highlighting of numbers and paths, no ANSI
    escapes (and no live display) when plain(), the width `width` gives."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    kwargs.setdefault("highlight", False)
    if plain():  # not even a spinner's cursor codes
        kwargs.update(color_system=None, no_color=True, force_terminal=False)
    return Console(stderr=stderr, width=width(stream, piped_width), **kwargs)
