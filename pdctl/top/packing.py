"""What `pdctl plan` predicts for decode packed N per GPU (phase 3), for top's verdicts (pure).

For each N the decode role is planned as `pdctl plan` plans a phase 3 spec with
`decode.share.perGpu: N` (pdctl.capacity.report: the HAMi slice, the util inside it, the KV
it holds, the decode batch that fits, the tokens/s of one instance at that batch). N
instances time-slice the GPU, so the plan gives each TIME_SLICE_EFFICIENCY / N (0.94, measured
on an H200: pdctl.capacity.roofline) of one instance alone at that batch; per GPU, N times
that."""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

from pdctl.capacity.report import role_plan
from pdctl.capacity.roofline import TIME_SLICE_EFFICIENCY
from pdctl.spec.pd import Share


@dataclass(frozen=True)
class Packing:
    per_gpu: int
    slice_mib: int
    fits: bool  # the slice holds the weights and one max-length sequence, N slices fit
    batch: int  # decode batch of one instance in the slice (KV, max-num-seqs, TPOT)
    kv_tokens: int
    instance_tps: float  # the plan's decode tokens/s of one instance at `batch`, time-sliced
    gpu_tps: float  # per GPU, the N instances together

    def line(self) -> str:
        """The figures as the verdict quotes them."""
        if not self.fits:
            return (
                f"pdctl plan: {self.per_gpu} slices of {self.slice_mib:,} MiB do not hold this "
                f"model's decode (weights and one max-length sequence each)"
            )
        return (
            f"pdctl plan for {self.per_gpu} per GPU: slices of {self.slice_mib:,} MiB, batch "
            f"{self.batch} each, {self.instance_tps:,.0f} tok/s per instance, about "
            f"{self.gpu_tps:,.0f} tok/s per GPU ({TIME_SLICE_EFFICIENCY:.2f}x: the instances "
            f"time-slice it)"
        )


def packings(model: Any, gpu: Any, shape: Any, traffic: Any, most: int = 4) -> dict[int, Packing]:
    """N (2..most) -> what the plan predicts for decode packed N per GPU of `gpu`."""
    out = {}
    for n in range(2, most + 1):
        section = SimpleNamespace(share=Share(per_gpu=n), gpu_memory_utilization=None, replicas=1)
        r = role_plan(model, gpu, "decode", section, shape, traffic)
        assert r.slice is not None
        tps = r.decode.tokens_per_s  # one slice's, time-sliced: 0.94 / n of it alone
        out[n] = Packing(n, r.slice.slice_mib, r.fits, r.batch, r.memory.kv_tokens, tps, tps * n)
    return out
