"""An `engine.device: cpu` spec (examples/cpu-quickstart.yaml): `bench`, `tune` and `top` do
not compare it with the plan of an assumed GPU (issue 40). The recorded report
(data/unbalanced-pd.json) is a real bench of the CPU build that was compared with an assumed
H100 (its TTFT "ratio" is 7.6e7): exactly what a CPU spec must no longer get."""

from __future__ import annotations

import json
from pathlib import Path

from pdctl.bench.load import Workload
from pdctl.bench.run import NO_GPU_PLAN
from pdctl.bench.tune import CPU_KV_SPACE, tune
from pdctl.cli.bench_cmd import _predictions
from pdctl.top.gpu import GpuLoad
from pdctl.top.verdict import verdicts
from pdctl.top.window import Figures, Window

ROOT = Path(__file__).parents[2]
DATA = Path(__file__).parent / "data"
CPU_SPEC = str(ROOT / "examples" / "cpu-quickstart.yaml")


def test_bench_on_a_cpu_spec_has_no_gpu_predictions_and_says_why():
    cap, basis, planned = _predictions(CPU_SPEC, Workload())
    assert (cap, basis, planned) == (None, NO_GPU_PLAN, None)
    assert basis == "engine.device cpu: no GPU plan"


def test_bench_on_a_gpu_spec_still_predicts():
    cap, basis, _ = _predictions(str(ROOT / "examples" / "phase0-docker.yaml"), Workload())
    assert cap is not None and basis != NO_GPU_PLAN


def _cpu_spec(**engine_env: str) -> dict:
    return {"phase": 2, "engine": {"device": "cpu", "env": dict(engine_env)},
            "prefill": {"replicas": 1}, "decode": {"replicas": 1}}


def _kv_full_report() -> dict:
    row = {"name": "x-decode-0", "role": "decode", "max_num_seqs": 8, "preemptions": 3,
           "peak": {"waiting": 0, "running": 8, "kv_usage": 0.97}}
    return {"workload": {}, "steps": [{
        "load": "concurrency 8", "measured": {"outputThroughput": 10.0, "itlMs": {}},
        "ratio": {"ttftMs": 7.6e7}, "metrics": {"instances": [row]}}]}


def test_tune_on_the_recorded_cpu_report_has_no_plan_vs_measured_notes():
    report = json.loads((DATA / "unbalanced-pd.json").read_text())
    result, _ = tune(_cpu_spec(), report, lambda overlay: "")
    assert result["notes"] == []
    assert result["cpu"].startswith("engine.device cpu: no GPU plan")
    gpu, _ = tune({**_cpu_spec(), "engine": {}}, report, lambda overlay: "")
    assert gpu["notes"] and gpu["cpu"] is None  # a GPU spec keeps them


def test_tune_on_a_cpu_spec_doubles_the_cpu_kv_space_not_tp():
    result, text = tune(_cpu_spec(**{CPU_KV_SPACE: "4"}), _kv_full_report(), lambda o: "")
    paths = {p["path"]: p["to"] for p in result["proposals"]}
    assert "decode.tensorParallel" not in paths
    assert paths[f"engine.env.{CPU_KV_SPACE}"] == "8"
    assert result["overlay"]["engine"] == {"env": {CPU_KV_SPACE: "8"}}
    without, _ = tune(_cpu_spec(), _kv_full_report(), lambda o: "")  # nothing set: no guess
    assert not [p for p in without["proposals"] if "tensorParallel" in p["path"]
                or CPU_KV_SPACE in p["path"]]


def _window() -> Window:
    busy = Figures("x-serve-0", "serve", "box", 60, kv_usage=0.95, preemptions=2, running=4,
                   waiting=0, max_num_seqs=256)
    idle = GpuLoad("box", 0, "NVIDIA H100", sm_util=1.0, dram_bw_util=1.0, tensor_util=0.0)
    return Window("cpu-quickstart", 0, "hosts", 60.0, (busy,), gpus=(idle,))


def test_top_on_a_cpu_engine_gives_no_gpu_verdicts_and_names_the_cpu_kv_space():
    found = {v.key: v.line for v in verdicts(_window(), cpu=True)}
    assert "gpu-idle" not in found
    assert CPU_KV_SPACE in found["kv-pressure"] and "gpu-memory" not in found["kv-pressure"]
    gpu = {v.key: v.line for v in verdicts(_window())}
    assert "gpu-idle" in gpu and "--gpu-memory-utilization" in gpu["kv-pressure"]
