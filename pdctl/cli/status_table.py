"""`pdctl status`'s table: every column as `status` reads it, or on a narrow terminal (under
NARROW columns, a terminal or COLUMNS) the same rows in fewer, shorter columns: a column every
row shares (the model, the supervisor) goes into the title, endpoints lose their `http://`,
and no vertical rules. At 80 columns the full table cut units, states and endpoints to '…'."""

from __future__ import annotations

from typing import Any

NARROW = 110
SHORT = {"supervisor": "sup"}  # a narrow table's header where the full one is wide
COLUMNS = ("host", "unit", "role", "pid", "state", "supervisor", "health", "model", "endpoint",
           "why")
ALWAYS = ("host", "unit", "role", "state")


def _filled(rows: list[dict[str, Any]], col: str) -> bool:
    return col in ALWAYS or any(row[col] not in ("", "-") for row in rows)


def status_table(rows: list[dict[str, Any]], title: str, narrow: bool) -> Any:
    """The rows as a rich Table (a column nothing fills, such as a pod's pid, left out)."""
    from rich import box
    from rich.table import Table

    columns = [c for c in COLUMNS if _filled(rows, c)]
    if not narrow:
        table = Table(title=title)
        for col in columns:
            table.add_column(col)
        for row in rows:
            table.add_row(*(str(row[c]) for c in columns))
        return table
    shared = []
    for col in ("model", "supervisor", "host"):
        values = {str(row[col]) for row in rows}
        if col in columns and len(values) == 1:
            shared.append(f"{col} {values.pop()}")
            columns.remove(col)
    if shared:
        title = f"{title}: {', '.join(shared)}"
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1, 0, 0),
                  collapse_padding=True)
    for col in columns:  # names and addresses whole; a long state or reason wraps by words
        table.add_column(SHORT.get(col, col), no_wrap=col not in ("state", "why"),
                         overflow="fold")
    for row in rows:
        table.add_row(*(str(row[c]).removeprefix("http://") if c == "endpoint" else str(row[c])
                        for c in columns))
    return table
