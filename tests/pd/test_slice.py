"""The HAMi slice formula and packing rules (pdctl/plan/slice.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdctl.errors import SpecError
from pdctl.plan.slice import (
    MAX_UTILIZATION,
    MIN_UTILIZATION,
    plan_slice,
    slice_utilization,
)
from pdctl.spec.pd import Decode, Share


def test_formula_values() -> None:
    # 40000 MiB with CUDA graphs: (40000 - 300 - 1536) / 40000 = 0.9541 -> capped at 0.90
    assert slice_utilization(40000, 1, False) == MAX_UTILIZATION
    # 10240 MiB: (10240 - 1836) / 10240 = 0.8207 -> 0.82
    assert slice_utilization(10240, 1, False) == 0.82
    # eager drops the CUDA-graph headroom: (10240 - 300) / 10240 = 0.9707 -> 0.90
    assert slice_utilization(10240, 1, True) == 0.9
    # TP 2 adds NCCL: (8192 - 300 - 1536 - 512) / 8192 = 0.7133 -> 0.71
    assert slice_utilization(8192, 2, False) == 0.71
    assert slice_utilization(None, 1, False) == 0.85
    assert slice_utilization(None, 1, True) == 0.9


def test_too_small_slice_is_refused() -> None:
    with pytest.raises(SpecError) as err:
        slice_utilization(3000, 1, False)
    assert err.value.path == "decode.share"


@given(size=st.integers(4700, 200_000), tp=st.integers(1, 2), eager=st.booleans())
def test_formula_bounds(size: int, tp: int, eager: bool) -> None:
    util = slice_utilization(size, tp, eager)
    assert MIN_UTILIZATION <= util <= MAX_UTILIZATION
    # what vLLM may take plus the headroom fits the slice
    headroom = 300 + (0 if eager else 1536) + 512 * (tp - 1)
    assert util * size + headroom <= size + 1e-6


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
