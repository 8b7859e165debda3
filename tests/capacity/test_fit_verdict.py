"""A role that does not fit stops you: `plan` exits 1, `validate` warns (refuses with
--strict), suggestions obey validate's rules, and assumed GPUs are said out loud."""

from __future__ import annotations

import json
from pathlib import Path

from pdctl.capacity import model_config
from pdctl.capacity.fit import Shape, alternatives, smallest_fit
from pdctl.capacity.gpus import GIB
from pdctl.capacity.models import BUILTIN
from pdctl.plan.parallel import Dims, valid_tp
from tests.capacity.conftest import serve_spec
from tests.helpers import cli, run_cli, written

HAMI = """\
name: sliced
phase: 3
model:
  name: Qwen/Qwen3-32B
  maxModelLen: 8192
kubernetes:
  namespace: x
prefill: {replicas: 1, tensorParallel: 2}
decode:
  replicas: 2
  tensorParallel: 1
  share: {perGpu: 2, gpuMemoryPercent: 50, gpuTotalMib: 46068, gpuType: L40S}
disaggregation: {connector: nixl}
"""


def _spec(tmp_path: Path, model: str, length: int, hardware: str = "") -> str:
    serve = "replicas: 1, tensorParallel: 1, gpuMemoryUtilization: 0.9"
    return str(written(tmp_path / "s.yaml", serve_spec(model, length, gpus=2, serve=serve,
                                                       tail=hardware)))


def test_plan_exits_1_when_a_role_does_not_fit(capsys, tmp_path: Path) -> None:
    # Llama-3.1-8B at 38k context on a 24 GB card (vllm#10517's refusal was 29k on vLLM 0.6.4,
    # whose sampler profile sorted; 0.33's sampler takes less, so 38k here)
    spec = _spec(tmp_path, "meta-llama/Llama-3.1-8B-Instruct", 38000, "hardware: {gpu: L4}\n")
    code, out, err = run_cli(["plan", spec], capsys)
    assert code == 1, (out, err)
    assert "serve does not fit" in out and "nearest that fits" in out
    code, out, _ = run_cli(["plan", spec, "-o", "json"], capsys)
    assert code == 1 and json.loads(out)["fits"] is False


def test_plan_exits_0_when_everything_fits(capsys, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "Qwen/Qwen3-8B", 8192, "hardware: {gpu: H100}\n")
    out, err = cli(["plan", spec, "-o", "json"])
    data = json.loads(out)
    assert data["fits"] is True and data["warnings"] == []


def test_no_gpu_given_is_a_warning_in_table_and_json(capsys, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "Qwen/Qwen3-8B", 8192)
    code, out, _ = run_cli(["plan", spec], capsys)
    assert code == 0 and "warning: no GPU given: planned for an H100-SXM" in out
    code, out, _ = run_cli(["plan", spec, "-o", "json"], capsys)
    assert any(w.startswith("no GPU given") for w in json.loads(out)["warnings"])


def test_unknown_gpu_memory_is_a_warning(capsys, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "Qwen/Qwen3-8B", 8192, "hardware: {gpuMemoryGib: 24}\n")
    code, out, _ = run_cli(["plan", spec, "-o", "json"], capsys)
    warnings = json.loads(out)["warnings"]
    assert any("GPU not in pdctl's table" in w and "H100-SXM" in w for w in warnings), warnings


def test_validate_warns_and_strict_refuses(capsys, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "meta-llama/Llama-3.1-8B-Instruct", 38000, "hardware: {gpu: L4}\n")
    code, out, err = run_cli(["validate", spec], capsys)
    assert code == 0, err
    assert f"{spec}: warning: serve: does not fit on an L4" in err
    assert "nearest that fits" in err and "1 capacity warning" in out
    code, out, err = run_cli(["validate", spec, "--strict"], capsys)
    assert code == 1 and "refused (--strict)" in err and "ok:" not in out


def test_validate_is_quiet_when_it_fits_or_no_gpu_is_named(capsys, tmp_path: Path) -> None:
    fits = _spec(tmp_path, "Qwen/Qwen3-8B", 8192, "hardware: {gpu: H100}\n")
    code, _, err = run_cli(["validate", fits, "--strict"], capsys)
    assert code == 0 and "warning" not in err
    unnamed = _spec(tmp_path, "meta-llama/Llama-3.1-8B-Instruct", 131072)
    code, _, err = run_cli(["validate", unnamed, "--strict"], capsys)
    assert code == 0 and "warning" not in err


def test_hami_slice_suggestions_never_use_tensor_parallel(capsys, tmp_path: Path) -> None:
    path = written(tmp_path / "hami.yaml", HAMI)
    out, err = cli(["plan", str(path), "-o", "json"], 1)
    decode = next(r for r in json.loads(out)["roles"] if r["role"] == "decode")
    assert decode["fits"] is False
    assert all(
        a["tensorParallel"] == 1 and a["pipelineParallel"] == 1 for a in decode["alternatives"]
    ), decode["alternatives"]
    assert decode["smallestFit"] is None or decode["smallestFit"]["tensorParallel"] == 1


def test_suggested_tp_always_divides_the_heads() -> None:
    model = model_config("Qwen/Qwen2.5-7B-Instruct")  # 28 heads: TP 8 is not allowed
    shape = Shape(max_model_len=131072)
    for gib in (8, 12, 16):
        best = smallest_fit(model, gib * GIB, shape)
        assert best is None or model.heads % best.tp == 0
        for alt in alternatives(model, gib * GIB, shape):
            assert model.heads % alt.shape.tp == 0, alt


def test_render_warns_and_strict_refuses_before_writing(capsys, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "meta-llama/Llama-3.1-8B-Instruct", 38000, "hardware: {gpu: L4}\n")
    code, out, err = run_cli(["render", spec], capsys)
    assert code == 0 and "start.sh" in out
    assert f"{spec}: warning: serve: does not fit on an L4" in err
    folder = tmp_path / "bundle"
    code, out, err = run_cli(["render", spec, "--strict", "--output-dir", str(folder)], capsys)
    assert code == 1 and "refused (--strict)" in err
    assert not folder.exists()  # nothing half-written
    fits = _spec(tmp_path, "Qwen/Qwen3-8B", 8192, "hardware: {gpu: H100}\n")
    code, _, err = run_cli(["render", fits, "--strict"], capsys)
    assert code == 0 and "warning" not in err


def test_gpu_cores_percent_is_a_warning_from_validate_and_render(capsys) -> None:
    """Measured on an H200: HAMi-core's SM limit does not slow GEMMs (tests/fixtures/gpu/
    hami-h200), so a gpuCoresPercent is said to be a placement hint, not a bound."""
    example = str(Path(__file__).resolve().parents[2] / "examples" / "phase3-hami.yaml")
    for command in ("validate", "render"):
        _, err = cli([command, example])
        assert "warning: decode.share.gpuCoresPercent: 50% is a placement hint" in err, command


def test_suggestions_follow_validates_parallel_rules_for_every_table_model() -> None:
    # The nearest-fit suggestions use the rule `validate` refuses with (plan/parallel.py):
    # TP divides the heads, KV heads split or replicate evenly, PP at most the layers.
    for name in BUILTIN:
        model = model_config(name)
        dims = Dims(name, model.heads, model.kv_heads, model.layers, mla=model.is_mla)
        allowed = valid_tp(dims)
        for gib, max_tp in ((16, 16), (24, 1), (48, 16), (80, 8)):
            shape = Shape(max_model_len=32768)
            found = [smallest_fit(model, gib * GIB, shape, max_tp=max_tp)]
            found += [a.shape for a in alternatives(model, gib * GIB, shape, max_tp=max_tp)]
            for s in found:
                if s is not None:
                    assert s.tp in allowed and s.tp <= max_tp, (name, gib, s.tp)
                    assert s.pp <= model.layers, (name, gib, s.pp)
