"""`pdctl plan --load`: the speed of a planned deployment under a load (modelled)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]


def test_json_has_every_figure_at_each_load(capsys) -> None:
    code, out, err = run_cli(
        ["plan", str(ROOT / "examples/phase0-conda.yaml"), "--gpu", "H200", "-o", "json",
         "--load", "concurrency=1", "--load", "concurrency=64", "--load", "rate=2",
         "--ttft-ms", "1000", "--tpot-ms", "30"],
        capsys,
    )
    assert code == 0, err
    loads = json.loads(out)["loads"]
    assert [x["load"] for x in loads] == ["concurrency=1", "concurrency=64", "rate=2"]
    one, many, rate = loads
    for x in loads:
        for key in ("ttftMs", "tpotMs", "itlMs", "e2elMs"):
            assert x[key]["p50"] > 0 and x[key]["p90"] >= x[key]["p50"]
        assert x["goodput"]["shareMeetingSlo"] <= 1
        assert "extrapolated from H100-SXM" in x["basis"]
    assert many["outputThroughput"] > 10 * one["outputThroughput"]
    assert many["tpotMs"]["p50"] > one["tpotMs"]["p50"]
    assert rate["requestThroughput"] == pytest.approx(2, rel=0.3)


def test_the_table_names_what_the_figures_rest_on(capsys) -> None:
    code, out, _ = run_cli(
        ["plan", str(ROOT / "examples/phase0-conda.yaml"), "--gpu", "H100-SXM",
         "--load", "concurrency=8"],
        capsys,
    )
    assert code == 0
    assert "speed at a load" in out and "concurrency=8" in out
    assert "calibrated on H100-SXM" in out


@pytest.mark.parametrize("bad", ["concurrency=0", "rate=-1", "concurrency=2.5", "qps=3",
                                 "rate=nan"])
def test_a_bad_load_is_one_line_and_exit_2(bad: str, capsys) -> None:
    code, out, err = run_cli(["plan", str(ROOT / "examples/phase0-conda.yaml"), "--load", bad],
                             capsys)
    assert code == 2
    assert "--load" in err and "Traceback" not in err
    assert len([line for line in err.splitlines() if line.strip()]) <= 2


def test_pd_loads_take_ttft_from_prefill_and_tpot_from_decode(capsys) -> None:
    code, out, err = run_cli(
        ["plan", str(ROOT / "examples/phase2-nixl-hosts.yaml"), "-o", "json",
         "--load", "concurrency=16"],
        capsys,
    )
    assert code == 0, err
    (x,) = json.loads(out)["loads"]
    assert x["ttftMs"]["p50"] > 0 and x["tpotMs"]["p50"] > 0
    assert x["e2elMs"]["p50"] > x["ttftMs"]["p50"]
