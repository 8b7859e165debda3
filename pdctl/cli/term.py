"""Every rich Console pdctl prints through: styling only where a user wants it, tables that
keep what identifies a row.

`NO_COLOR` (any non-empty value, https://no-color.org) and `TERM=dumb` turn off every ANSI
escape, bold and italic included (rich's own NO_COLOR handling drops colours but keeps bold).

Width: `COLUMNS` when set, else a terminal's own, else (a pipe or a file) `piped_width`
(rich's 80 by default) for prose, which wraps there. No line is ever cut: `print` does not
crop, and a logged line (`log`: a progress step with its time) into a pipe or a file without
COLUMNS is printed whole, on one line. Tables (`fit`), as kubectl prints them:
- into a pipe or a file without COLUMNS, as wide as their cells need: nothing is cut, so a
  script reading a table gets whole names;
- narrower than the table (a terminal, or COLUMNS), the other columns wrap or are cut, never
  a KEY column (the unit, instance or worker name, the endpoint or URL)."""

from __future__ import annotations

import os
import sys
import threading
from contextlib import nullcontext
from typing import IO, Any

from rich.console import Console, Group, RenderHook
from rich.measure import Measurement
from rich.table import Table

KEY = frozenset({"unit", "instance", "worker", "endpoint", "url"})  # column headers never cut
UNBOUNDED = 100_000  # a width no table reaches: measuring what its cells need


def plain() -> bool:
    """Whether the environment asks for no styling at all."""
    return os.environ.get("NO_COLOR", "") != "" or os.environ.get("TERM", "") == "dumb"


def _columns() -> int | None:
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def _terminal(stream: IO[str]) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def sized(stream: IO[str]) -> bool:
    """Whether output on `stream` has a width to fit (COLUMNS, or a terminal); else it is
    piped and every table prints whole."""
    return _columns() is not None or _terminal(stream)


def width(stream: IO[str], piped_width: int | None) -> int | None:
    """The width for a console on `stream`: COLUMNS, else a terminal's own (None), else
    piped_width (None: rich's default of 80)."""
    columns = _columns()
    if columns is not None:
        return columns
    return None if _terminal(stream) else piped_width


def console(stderr: bool = False, piped_width: int | None = None, **kwargs: Any) -> Console:
    """A rich Console on stdout (or stderr): no highlighting of numbers and paths, no ANSI
    escapes (and no live display) when plain(), the width `width` gives, and every table it
    prints fitted (`fit`); a line a fitted table makes wider than the console is printed
    whole, not cropped."""
    stream = sys.stderr if stderr else sys.stdout
    whole = not sized(stream)

    class Fit(RenderHook):
        def process_renderables(self, renderables: list[Any]) -> list[Any]:
            for renderable in renderables:
                fit(renderable, out, whole)
            return renderables

    class Uncropped(Console):
        widening = threading.RLock()

        def print(self, *objects: Any, **options: Any) -> None:
            options.setdefault("crop", False)
            with self.widening if whole else nullcontext():  # not while log lifts the width
                super().print(*objects, **options)

        def log(self, *objects: Any, **options: Any) -> None:
            """rich crops each logged line at the console's width (log takes no crop=);
            into a pipe or a file without COLUMNS a logged line is printed whole instead:
            the Fit hook makes it as wide as it needs, and the width is lifted meanwhile."""
            options.setdefault("_stack_offset", 2)
            if not whole:
                super().log(*objects, **options)
                return
            with self.widening:  # print and log may come from several threads
                narrow = self.width
                self.width = UNBOUNDED
                try:
                    super().log(*objects, **options)
                finally:
                    self.width = narrow

    kwargs.setdefault("highlight", False)
    if plain():  # not even a spinner's cursor codes
        kwargs.update(color_system=None, no_color=True, force_terminal=False)
    out = Uncropped(stderr=stderr, width=width(stream, piped_width), **kwargs)
    out.push_render_hook(Fit())
    return out


def fit(renderable: object, out: Console, whole: bool = False) -> None:
    """Fit the tables in `renderable` (a Table, or a Group of them). With `whole`, a table is
    as wide as its cells need, whatever `out`'s width. Else a KEY column keeps its whole text,
    unwrapped, however narrow `out` is; rich narrows, wraps or cuts the other columns (the
    widest first) when the table is too wide."""
    if isinstance(renderable, Group):
        for inner in renderable.renderables:
            fit(inner, out, whole)
    if not isinstance(renderable, Table):
        return
    unbounded = out.options.update_width(UNBOUNDED)
    if whole:
        renderable.width = Measurement.get(out, unbounded, renderable).maximum
        return
    for column in renderable.columns:
        if str(column.header).strip().lower() in KEY:
            cells = [column.header, *column.cells]
            need = max(Measurement.get(out, unbounded, cell).maximum for cell in cells)
            column.no_wrap, column.min_width = True, need
