"""`pdctl top --once` at 80 columns (COLUMNS=80): the recorded phase 0 window (data/) with one
H200 of the top-h200 recording's figures renders with no line over 80 columns and no figure
or header cut to "…" (the one 14-column instance table showed `r…`, `w…`, `8…` there; issue
40): the instances split into a load table and a latency/KV table, short GPU headers."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdctl.cli import term
from pdctl.top.dashboard import render
from pdctl.top.gpu import GpuLoad
from pdctl.top.metrics import parse
from pdctl.top.verdict import verdicts
from pdctl.top.window import Window, figures

DATA = Path(__file__).parent / "data"


def window() -> Window:
    f = figures("e2etop-serve-0", "serve", "lo1",
                parse((DATA / "phase0-before.prom").read_text(), 0.0),
                parse((DATA / "phase0-after.prom").read_text(), 45.0))
    g = GpuLoad("lo1", 0, "NVIDIA H200", sm_util=1.0, dram_bw_util=1.0, tensor_util=0.0,
                mem_used_mib=120000, mem_total_mib=143771, power_w=120, roles=("serve",))
    return Window("e2etop", 0, "hosts", 45.0, (f,), gpus=(g,))


def shown(columns: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> str:
    monkeypatch.setenv("COLUMNS", columns)
    w = window()
    console = term.console()
    console.print(render(w, verdicts(w), width=console.width))
    return capsys.readouterr().out


def test_top_at_80_columns_cuts_nothing(monkeypatch, capsys):
    out = shown("80", monkeypatch, capsys)
    assert max(len(line) for line in out.splitlines()) <= 80, out
    assert "…" not in out, out
    for whole in ("e2etop-serve-0", "prompt t/s", "TTFT ms", "8/36", "KV recv", "117/140G"):
        assert whole in out, out


def test_a_wide_terminal_keeps_one_instance_table(monkeypatch, capsys):
    out = shown("200", monkeypatch, capsys)
    assert "TTFT p50/p95 ms" in out and "120000/143771" in out, out
