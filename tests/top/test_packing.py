"""The phase 3 verdict quotes `pdctl plan`'s prediction for the packing it advises: the same
slice, batch and tokens/s `pdctl plan` prints for a phase 3 spec packing decode N per GPU."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pdctl.capacity import find_gpu, spec_model_config, spec_shape
from pdctl.capacity.report import Traffic
from pdctl.cli.specfile import load, read_spec
from pdctl.cli.top_cmd import _packed
from pdctl.inputs import capacity_plan
from pdctl.top.gpu import GpuLoad
from pdctl.top.packing import Packing, packings
from pdctl.top.verdict import verdicts
from tests.helpers import written
from tests.top.test_gpu import window_on

EXAMPLE = Path(__file__).parents[2] / "examples" / "phase3-hami-hosts.yaml"


def spec_with(tmp_path: Path, per_gpu: int, total: bool = False) -> str:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["decode"]["share"]["perGpu"] = per_gpu
    if not total:  # `pdctl plan` would size the slices of that GPU, not of --gpu's
        doc["decode"]["share"].pop("gpuTotalMib")
    path = written(tmp_path / f"p{per_gpu}.yaml", yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize("per_gpu", [2, 3])
def test_packings_are_what_pdctl_plan_predicts_for_that_phase3_spec(tmp_path, per_gpu):
    path = spec_with(tmp_path, per_gpu)
    spec, source = read_spec(path)
    plan, _ = capacity_plan(spec, source, path, gpu="H200")
    dec = plan.role("decode")
    found = packings(
        spec_model_config(spec.model), find_gpu("H200"), spec_shape(spec, "decode"), Traffic()
    )[per_gpu]
    assert found.slice_mib == dec.slice.slice_mib
    assert found.batch == dec.batch and found.kv_tokens == dec.memory.kv_tokens
    assert found.instance_tps == pytest.approx(dec.decode.tokens_per_s)
    # the plan's per-instance figure is time-sliced (0.94 / N of one instance alone): the N
    # instances give N times it per GPU, 0.94x of one alone at that batch
    assert found.gpu_tps == pytest.approx(per_gpu * dec.decode.tokens_per_s)
    assert dec.decode.per_gpu == per_gpu
    assert found.fits == dec.fits


def fake(n: int, fits: bool = True) -> Packing:
    return Packing(n, 143771 // n, fits, 100 // n, 1000, 1200.0 - n, 1000.0 - n)


def pack_line(packed: dict[int, Packing]) -> str:
    (v,) = verdicts(window_on("decode-b64"), packed=packed)  # KV 20%: pack 4 advised
    assert v.key == "decode-pack"
    return v.line


def test_the_verdict_names_the_plans_per_gpu_throughput_for_the_advised_packing():
    line = pack_line({n: fake(n) for n in (2, 3, 4)})
    assert "pack 4 decode instances per GPU" in line
    assert "pdctl plan for 4 per GPU: slices of 35,942 MiB, batch 25 each, 1,196 tok/s per " in line
    assert "about 996 tok/s per GPU (0.94x" in line


def test_a_packing_the_plan_says_does_not_fit_is_not_advised():
    line = pack_line({2: fake(2), 3: fake(3), 4: fake(4, fits=False)})
    assert "pack 3 decode instances per GPU" in line
    assert "pdctl plan for 3 per GPU: slices of 47,923 MiB" in line
    assert "(4 per GPU would not: 35,942 MiB slices)" in line


def test_no_packing_that_fits_says_so():
    line = pack_line({n: fake(n, fits=False) for n in (2, 3, 4)})
    assert "pdctl plan: 2 slices of 71,885 MiB do not hold this model's decode" in line


def test_real_plan_figures_on_the_h200_recording(tmp_path):
    spec, _ = read_spec(spec_with(tmp_path, 2))
    shape = replace(spec_shape(spec, "decode"))
    packed = packings(spec_model_config(spec.model), find_gpu("H200"), shape, Traffic())
    line = pack_line(packed)
    best = max(n for n, p in packed.items() if p.fits)
    assert f"pack {best} decode instances per GPU" in line
    assert f"about {packed[best].gpu_tps:,.0f} tok/s per GPU" in line


def test_top_plans_the_packing_on_the_spec_gpu_else_the_one_the_telemetry_names(tmp_path):
    path = spec_with(tmp_path, 2, total=True)
    plan, _ = load(path, None, None)
    spec, _ = read_spec(path)
    h200 = packings(
        spec_model_config(spec.model), find_gpu("H200"), spec_shape(spec, "decode"), Traffic()
    )
    # the example names no GPU type: the telemetry's
    assert _packed(path, plan, [GpuLoad("gpu-a", 0, "NVIDIA H200")]) == h200
    assert _packed(path, plan, []) == {}  # no GPU known: no invented prediction
    doc = yaml.safe_load(Path(path).read_text())
    doc["decode"]["share"]["gpuType"] = "H100-SXM"
    doc["decode"]["share"]["gpuTotalMib"] = 81559  # an H100's (an H200's total contradicts it)
    Path(path).write_text(yaml.safe_dump(doc))
    plan, _ = load(path, None, None)
    h100 = _packed(path, plan, [GpuLoad("gpu-a", 0, "NVIDIA H200")])
    assert h100 and h100 != h200  # the spec's GPU wins
