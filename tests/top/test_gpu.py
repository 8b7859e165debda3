"""GPU telemetry: the H200 recordings (tests/fixtures/gpu/top-h200, made with the very probe
pdctl runs on hosts) and the verdict code telling a bandwidth-bound decode from a
compute-bound load."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from pdctl.top.gpu import kind, parse_dcgm, parse_probe, probe_command
from pdctl.top.metrics import parse
from pdctl.top.verdict import limits, verdicts
from pdctl.top.window import Figures, Window

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "gpu" / "top-h200"


def recorded(name: str):
    (gpu,), errors = parse_probe("h200", (H200 / f"{name}.jsonl").read_text())
    assert errors == []
    return gpu


def test_the_recordings_parse_as_gpm_averages():
    gpu = recorded("decode-b64")
    assert (gpu.name, gpu.source, gpu.mem_total_mib) == ("NVIDIA H200", "gpm", 143771)
    assert (gpu.sm_util, gpu.dram_bw_util, gpu.tensor_util) == (80.8, 75.8, 23.3)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("idle", "idle"),
        ("decode-b8", "bandwidth-bound"),
        ("decode-b64", "bandwidth-bound"),
        ("decode-b256", "compute-bound"),  # batch 256 fills the tensor pipes (70.8%)
        ("matmul", "compute-bound"),
    ],
)
def test_gpm_tells_bandwidth_bound_from_compute_bound(name, expected):
    assert kind(recorded(name), limits()) == expected


def test_nvml_gpu_utilisation_alone_cannot_tell_them_apart():
    """NVML's 'GPU utilization' read 100 under both loads; its memory % still separates them
    (the fallback where GPM is missing)."""
    decode, matmul = recorded("decode-b64"), recorded("matmul")
    assert decode.util_gpu == matmul.util_gpu == 100
    strip = {
        "source": "nvml", "sm_util": None, "sm_occupancy": None, "dram_bw_util": None,
        "tensor_util": None,
    }
    assert kind(replace(decode, **strip), limits()) == "bandwidth-bound"
    assert kind(replace(matmul, **strip), limits()) == "busy"


def window_on(
    gpu_name: str, kv: float = 0.2, running: float = 12, waiting: float = 0,
    max_num_seqs: int | None = 256,
) -> Window:
    gpu = replace(recorded(gpu_name), host="gpu-a", index=0, roles=("decode",))
    dec = Figures(
        "llm-decode-0", "decode", "gpu-a", 60.0, running=running, waiting=waiting, kv_usage=kv,
        generation_tps=900.0, max_num_seqs=max_num_seqs, gpus=(("gpu-a", 0),),
    )
    return Window("llm", 2, "hosts", 60.0, (dec,), (gpu,))


def test_bandwidth_bound_decode_that_cannot_fill_its_batch_gets_phase3_advice():
    (v,) = verdicts(window_on("decode-b64"))
    assert v.key == "decode-pack"
    assert "DRAM 76% >= 60%, tensor 23% <= 30%, KV 20% <= 50%" in v.line
    assert "phase 3, pack 4 decode instances per GPU" in v.line
    assert "0.94x" in v.line


def test_bandwidth_bound_decode_with_a_full_batch_is_told_to_raise_max_num_seqs():
    (v,) = verdicts(window_on("decode-b8", running=256, max_num_seqs=256))
    assert v.key == "decode-raise-batch"
    assert "running 256 of max-num-seqs 256" in v.line and "raise --max-num-seqs" in v.line


def test_compute_bound_gpu_gets_no_decode_advice():
    assert verdicts(window_on("matmul")) == []
    assert verdicts(window_on("decode-b256")) == []


def test_idle_gpu_is_named():
    (v,) = verdicts(window_on("idle"))
    assert v.key == "gpu-idle" and v.line.startswith("GPU gpu-a/0 (decode) idle: SM 0%")


def test_the_probe_command_runs_and_reports_missing_nvml(tmp_path):
    """The exact command pdctl sends over SSH, run by a local shell: on a machine without a
    GPU driver it prints one JSON line naming what is missing."""
    out = subprocess.run(
        ["bash", "-c", probe_command(0.1)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    gpus, errors = parse_probe("here", out)
    try:
        import pynvml

        pynvml.nvmlInit()
        pytest.skip("this machine has NVML; the message path is for GPU-less hosts")
    except Exception:
        pass
    assert gpus == [] and errors and errors[0].startswith("NVML:"), out


def test_probe_output_that_is_not_json_is_a_named_problem():
    gpus, errors = parse_probe("h", "bash: python3: command not found\n")
    assert gpus == [] and "printed nothing" in errors[0]


def test_dcgm_exporter_fields_become_percentages():
    labels = '{gpu="0",UUID="GPU-1",modelName="NVIDIA H200",Hostname="node-a"}'
    values = {"PROF_DRAM_ACTIVE": 0.758, "PROF_PIPE_TENSOR_ACTIVE": 0.233,
              "PROF_SM_ACTIVE": 0.808, "DEV_FB_USED": 8707}
    text = "".join(f"# TYPE DCGM_FI_{k} gauge\nDCGM_FI_{k}{labels} {v}\n"
                   for k, v in values.items())
    (g,) = parse_dcgm(parse(text, 0.0))
    assert (g.host, g.index, g.source) == ("node-a", 0, "dcgm")
    assert (g.dram_bw_util, g.tensor_util, g.sm_util, g.mem_used_mib) == (75.8, 23.3, 80.8, 8707)
    assert kind(g, limits()) == "bandwidth-bound"


def test_a_host_python_without_pynvml_is_named_with_the_package_to_install(tmp_path) -> None:
    """The probe runs with the host's python3: when it lacks pynvml the reason names that
    interpreter and the package (nvidia-ml-py), not Python's 'No module named' text."""
    (tmp_path / "pynvml.py").write_text("raise ImportError('not here')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    cmd = ["bash", "-c", probe_command(0.1)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    (why,) = json.loads(out.stdout)["errors"]
    assert why.startswith("NVML: no pynvml for /"), why
    assert why.endswith(" (pip install nvidia-ml-py there)"), why
