"""`pdctl status` at 80 columns (issue 40): the rows of a P/D deployment as `status` read them
on the e2e's NIXL deployment (one with an outdated decode) print with no line over 80 and
nothing cut to '…'; the full table stays for wide terminals."""

from __future__ import annotations

import io

from rich.console import Console

from pdctl.cli.status_table import status_table


def row(unit: str, role: str, pid: str, port: int, state: str = "running") -> dict:
    return {"host": "lo1", "unit": unit, "role": role, "pid": pid, "state": state,
            "supervisor": "nohup", "health": "healthy", "model": "tiny",
            "endpoint": f"http://127.0.0.1:{port}", "why": "", "kind": "instance"}


ROWS = [row("e2ebpd-decode-0", "decode", "23781", 18791, "running (outdated)"),
        row("e2ebpd-prefill-0", "prefill", "19567", 18790),
        row("e2ebpd-router", "router", "22186", 18792)]
TITLE = "e2ebpd (phase 2, hosts)"


def shown(narrow: bool, width: int) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(status_table(ROWS, TITLE, narrow))
    return out.getvalue()


def test_at_80_columns_every_figure_is_whole_and_no_line_is_wider():
    text = shown(True, 80)
    assert max(len(line) for line in text.splitlines()) <= 80, text
    assert "…" not in text, text
    for r in ROWS:
        assert r["unit"] in text and r["state"] in text and r["pid"] in text
        assert r["endpoint"].removeprefix("http://") in text
    assert "model tiny, supervisor nohup, host lo1" in text  # every row's: said once


def test_the_full_table_cut_them_at_80_columns_and_keeps_every_column_when_wide():
    assert "…" in shown(False, 80)  # why the narrow form exists
    wide = shown(False, 200)
    assert all(c in wide for c in ("supervisor", "model", "http://127.0.0.1:18791"))


def test_a_column_that_differs_between_rows_stays_a_column():
    mixed = [dict(ROWS[0], supervisor="systemd"), *ROWS[1:]]
    out = io.StringIO()
    Console(file=out, width=80, color_system=None).print(status_table(mixed, TITLE, True))
    text = out.getvalue()
    assert " sup " in text and "systemd" in text and "model tiny, host lo1" in text
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text, text
