"""The HAMi slice formula and packing rules (pdctl/plan/slice.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdctl.errors import SpecError
from pdctl.hami import MAX_UTILIZATION, MIN_UTILIZATION, slice_utilization
from pdctl.plan.slice import plan_slice
from pdctl.spec.pd import Decode, Share


def test_formula_values() -> None:
    # 40000 MiB with CUDA graphs: (40000 - 768 - 1536) / 40000 = 0.9424 -> 0.94
    assert slice_utilization(40000, 1, False) == 0.94
    # the cap: (143771 - 2304) / 143771 = 0.984 -> 0.95
    assert slice_utilization(143771, 1, False) == MAX_UTILIZATION == 0.95
    # 10240 MiB: (10240 - 2304) / 10240 = 0.775 -> 0.77
    assert slice_utilization(10240, 1, False) == 0.77
    # eager drops the CUDA-graph headroom: (10240 - 768) / 10240 = 0.925 -> 0.92
    assert slice_utilization(10240, 1, True) == 0.92
    # TP 2 adds NCCL: (8192 - 768 - 1536 - 512) / 8192 = 0.6562 -> 0.65
    assert slice_utilization(8192, 2, False) == 0.65
    assert slice_utilization(None, 1, False) == 0.85
    assert slice_utilization(None, 1, True) == 0.9


def test_too_small_slice_is_refused() -> None:
    with pytest.raises(SpecError) as err:
        slice_utilization(3000, 1, False)
    assert err.value.path == "decode.share"


@given(size=st.integers(5700, 200_000), tp=st.integers(1, 2), eager=st.booleans())
def test_formula_bounds(size: int, tp: int, eager: bool) -> None:
    util = slice_utilization(size, tp, eager)
    assert MIN_UTILIZATION <= util <= MAX_UTILIZATION
    # what vLLM may take plus the headroom fits the slice
    headroom = 768 + (0 if eager else 1536) + 512 * (tp - 1)
    assert util * size + headroom <= size + 1e-6


H200_RUNS = Path(__file__).resolve().parents[1] / "fixtures/gpu/hami-h200"


def _h200_runs(name: str) -> list[dict]:
    return [json.loads(line) for line in (H200_RUNS / name).read_text().splitlines()]


def test_fraction_holds_on_the_h200_and_wastes_little() -> None:
    """Against the real HAMi-core on an H200: for each slice size and mode measured, pdctl's
    fraction is at most the largest that held (KV, CUDA graphs and the runtime peak inside the
    slice) and at most 0.05 below it."""
    held: dict[tuple[int, bool], float] = {}
    failed: dict[tuple[int, bool], float] = {}
    for run in _h200_runs("headroom.jsonl"):
        key = (run["total_mib"], run["eager"])
        book = failed if run.get("error") else held
        book[key] = max(book.get(key, 0.0), run["util"])
    assert held and failed  # the search bracketed the limit
    for (size, eager), best in held.items():
        util = slice_utilization(size, 1, eager)
        assert util <= best, (size, eager, util, best)
        assert best - util <= 0.05 + 1e-9, (size, eager, util, best)
        assert util < failed.get((size, eager), 1.0)


def test_packed_instances_did_not_run_out_of_memory() -> None:
    runs = _h200_runs("packing.jsonl")
    assert len(runs) == 19
    assert all("error" not in r and r["stage"] == "done" for r in runs)
    for r in runs:
        if r["preload"]:  # under HAMi-core CUDA's total is the slice
            assert r["total_mib"] in (143771 * 50 // 100, 143771 * 33 // 100, 143771 * 25 // 100)


def test_defaults_and_auto_eager() -> None:
    sl = plan_slice(Decode(share=Share(per_gpu=4)))
    assert sl.memory_percent == 25 and sl.memory_mib is None and sl.size_mib is None
    assert not sl.enforce_eager and sl.gpu_memory_utilization == 0.85
    small = plan_slice(Decode(share=Share(per_gpu=4, gpu_total_mib=81559)))
    assert small.size_mib == 20389 and small.enforce_eager  # < 24 GiB: eager by default
    big = plan_slice(Decode(share=Share(per_gpu=2, gpu_total_mib=143771)))
    assert not big.enforce_eager
    forced = plan_slice(Decode(share=Share(per_gpu=4, gpu_total_mib=81559, enforce_eager=False)))
    assert not forced.enforce_eager
    user = plan_slice(Decode(gpu_memory_utilization=0.7, share=Share()))
    assert user.gpu_memory_utilization == 0.7


@given(n=st.integers(1, 16), pct=st.integers(1, 100))
def test_packing_rule(n: int, pct: int) -> None:
    share = Share(per_gpu=n, gpu_memory_percent=pct, enforce_eager=True)
    if n * pct > 100:
        with pytest.raises(SpecError):
            plan_slice(Decode(share=share))
    else:
        assert plan_slice(Decode(share=share)).memory_percent == pct
