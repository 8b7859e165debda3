"""`pdctl bench`'s tables at 80 columns (issue 40): the per-role table kept ten columns with
long headers, so rich cut its headers and its numbers ("530…" for a 530.8 tok/s)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pdctl.cli.bench_show import show

ROOT = Path(__file__).resolve().parents[2]
REPORTS = [
    ROOT / "tests/fixtures/gpu/vllm023-h200/bench/bench.json",  # phase 0, one H200
    ROOT / "tests/bench/data/unbalanced-pd.json",  # P/D: prefill and decode instances
    # Mooncake P/D on an H100, its step sent with at most 28 in flight (the note under it)
    ROOT / "tests/fixtures/gpu/vllm023-h100-g/phase2-mooncake-bench/bench.json",
]


@pytest.mark.parametrize("path", REPORTS, ids=lambda p: p.parent.name)
def test_bench_tables_fit_80_columns_and_cut_no_figure(path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    report = json.loads(path.read_text())
    show(report)
    out = capsys.readouterr().out
    tables = [line for line in out.splitlines() if not line.startswith("  GPU ")]
    assert all(len(line) <= 80 for line in tables), out
    assert "…" not in out, out  # no header, instance name or number cut
    prefix = f"{report['name']}-"  # the units' shared part is said once, in the title
    assert f"({prefix}* units, peaks from /metrics" in " ".join(out.split())
    for row in report["steps"][0]["metrics"]["instances"]:
        assert row["name"].removeprefix(prefix) in out
