"""`pdctl preflight` on an 80-column terminal (COLUMNS=80), replaying the live H200 recording:
each finding is a block of lines, no line is wider than 80 and no check name, host/node or
fix is cut into pieces (a six-column table there wrapped `host.runtime` as `host.runtim` /
`e` and `h200x2/llama8b-tp2-serve-0` over three lines; issue 40)."""

from __future__ import annotations

from tests.helpers import pdctl
from tests.preflight.conftest import FIX

LIVE = FIX / "h200x2-live"


def test_preflight_at_80_columns_keeps_every_name_whole():
    proc = pdctl("preflight", str(LIVE / "spec.yaml"), "--replay", str(LIVE),
                 env={"COLUMNS": "80"})
    lines = proc.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 80, proc.stdout
    assert "WARN host.runtime h200x2" in lines, proc.stdout
    assert "PASS tp.nvlink h200x2/llama8b-tp2-serve-0" in lines, proc.stdout
    fix = [line.strip() for line in lines if line.strip().startswith("fix:")]
    assert "fix:      /opt/torch/.venv/bin/pip install vllm==0.33.0" in fix, proc.stdout
    assert "…" not in proc.stdout


def test_a_wide_terminal_keeps_the_table():
    proc = pdctl("preflight", str(LIVE / "spec.yaml"), "--replay", str(LIVE),
                 env={"COLUMNS": "200"})
    assert "┃ status ┃ check" in proc.stdout, proc.stdout
