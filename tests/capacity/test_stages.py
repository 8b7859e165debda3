"""Pipeline stages as vLLM profiles them, and memory other processes hold on the GPU.

Each PP rank profiles its own layers (the first stage also the embedding and the encoder, the
last the lm_head and the sampler) and vLLM gives every rank the fewest blocks any rank has
(`unify_kv_cache_configs`). vLLM 0.8.x's V1 worker took other processes' GPU memory as its
own (vllm#17431); later engines refuse to start with less free than total x util.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from pdctl.capacity import alternatives, find_gpu, instance_memory, model_config, model_fit
from pdctl.capacity.fit import Shape, stage_memories
from pdctl.capacity.gpus import GIB
from pdctl.capacity.memory import stage_partition, used_memory_notes, weights_bytes_per_gpu
from tests.capacity.conftest import serve_spec
from tests.capacity.vllm_logs import LOGS, shape, total_bytes
from tests.helpers import cli, run_cli, written


@pytest.mark.parametrize(
    ("layers", "pp", "parts"),
    [(27, 2, (14, 13)), (30, 4, (7, 8, 8, 7)), (61, 4, (15, 15, 16, 15)), (32, 4, (8,) * 4)],
)
def test_stage_partition_is_vllms_get_pp_indices(layers: int, pp: int, parts: tuple) -> None:
    # vllm/distributed/utils.py get_pp_indices: the remainder goes to the stages before the
    # last, from the second-to-last backwards
    assert stage_partition(layers, pp) == parts


def test_the_sampler_is_charged_to_the_last_stage_only() -> None:
    model = model_config("deepseek-ai/DeepSeek-V2-Lite")
    shape = Shape(
        tp=2, pp=2, max_model_len=1024, enforce_eager=True, gpu="L4", engine="0.9.2",
        flashinfer_sampler=False,
    )
    first, last = stage_memories(model, find_gpu("L4").usable_bytes, 0.9, shape)
    # 256 sequences x 102,400 logits x 38.6 bytes: 0.94 GiB, on the last stage only
    assert last.overhead.activation - first.overhead.activation > 0.8 * GIB
    assert first.kv_per_token == 14 * 576 * 2 and last.kv_per_token == 13 * 576 * 2
    # the first stage has more layers and sets the tokens
    assert instance_memory(model, find_gpu("L4").usable_bytes, 0.9, shape).stage == 0


def test_the_stage_with_the_fewest_tokens_sets_them() -> None:
    # Llama-3.1-8B at PP 2: 16 layers each; the last stage adds the sampler (1,024 x 128,256
    # logits on an H200: ~4.7 GiB), more than the first stage's forward pass
    model = model_config("meta-llama/Llama-3.1-8B-Instruct")
    shape = Shape(pp=2, max_model_len=8192, gpu="H200")
    total = find_gpu("H200").usable_bytes
    first, last = stage_memories(model, total, 0.9, shape)
    assert last.kv_tokens < first.kv_tokens
    mem = instance_memory(model, total, 0.9, shape)
    assert mem.stage == 1 and mem.kv_tokens == last.kv_tokens
    # weights: the heaviest stage, embedding on the first, lm_head on the last (untied: equal)
    assert weights_bytes_per_gpu(model, pp=2) == max(first.weights, last.weights)
    assert model_fit(model, shape).need_bytes >= last.weights + last.overhead.total


def test_v1_08_counts_other_processes_memory_later_engines_refuse_instead() -> None:
    model = model_config("Qwen/Qwen3-8B")
    gpu = find_gpu("A100-80GB")
    used = 30 * GIB
    v085 = Shape(max_model_len=40960, gpu=gpu.name, engine="0.8.5")
    alone = instance_memory(model, gpu.usable_bytes, 0.4, v085)
    shared = instance_memory(model, gpu.usable_bytes, 0.4, v085, used)
    assert alone.fits and not shared.fits  # vllm#17431: V1 0.8.5 refused, V0 started
    assert alone.kv_available - shared.kv_available == used
    v0 = instance_memory(model, gpu.usable_bytes, 0.4, replace(v085, engine="0.7"), used)
    assert v0.fits and v0.kv_available == alone.kv_available  # V0: measured from a baseline
    new = replace(v085, engine="0.10.1")
    assert instance_memory(model, gpu.usable_bytes, 0.4, new, used).fits  # 48 GiB free > 32
    assert not instance_memory(model, gpu.usable_bytes, 0.7, new, used).fits  # free < 56 GiB


QUERY = (
    "index, uuid, name, memory.total [MiB], memory.used [MiB]\n"
    "0, GPU-0, NVIDIA A100 80GB PCIe, 81920 MiB, {used} MiB\n"
)


def _spec(tmp_path: Path, version: str, used_mib: int) -> tuple[Path, Path]:
    spec = written(tmp_path / "spec.yaml", serve_spec(
        "Qwen/Qwen3-8B", 40960, serve="replicas: 1, gpuMemoryUtilization: 0.4",
        head=f'engine: {{version: "{version}"}}\nhardware: {{gpu: A100-80GB}}\n'))
    facts = tmp_path / "facts"
    facts.mkdir()
    (facts / "query-gpu.csv").write_text(QUERY.format(used=used_mib))
    return spec, facts


def test_the_v1_08_note_names_the_cause() -> None:
    # pdctl deploys vLLM 0.10 and later only (spec validation), so the plan meets the 0.8.x
    # behaviour only through this function; the table's logs and --from-log use it too
    model = model_config("Qwen/Qwen3-8B")
    shape = Shape(max_model_len=40960, gpu="A100-80GB", engine="0.8.5")
    mem = instance_memory(model, find_gpu("A100-80GB").usable_bytes, 0.4, shape, 30 * GIB)
    (note,) = used_memory_notes("serve", mem, "0.8.5")
    assert "30.00 GiB in use by other processes" in note and "vllm#17431" in note


def test_plan_facts_warns_and_refuses_when_free_memory_is_short(tmp_path: Path, capsys) -> None:
    spec, facts = _spec(tmp_path, "0.10.1", 30 * 1024)  # 50 GiB free >= 0.4 x 80
    code, out, err = run_cli(["plan", str(spec), "-o", "json", "--facts", str(facts)], capsys)
    assert code == 0, err
    assert not any("other processes" in w for w in json.loads(out)["warnings"])
    (tmp_path / "b").mkdir()
    spec, facts = _spec(tmp_path / "b", "0.10.1", 60 * 1024)  # 20 GiB free < 0.4 x 80
    code, out, err = run_cli(["plan", str(spec), "-o", "json"], capsys)
    assert code == 0, err  # without the recording: fits
    out, err = cli(["plan", str(spec), "-o", "json", "--facts", str(facts)], 1)
    data = json.loads(out)
    assert not data["roles"][0]["fits"]
    assert any(
        "60.00 GiB in use by other processes" in w and "refuses to start" in w
        for w in data["warnings"]
    ), data["warnings"]


def test_the_known_0_8_misses_refuse_with_enough_memory_held_by_others() -> None:
    # Neither issue says what else was on the card (so the table carries no figure); this only
    # shows the 0.8.x rule turns pdctl's verdict at the threshold docs/capacity.md gives.
    for name, threshold in (("Qwen3-8B, A800", 9.39), ("Qwen2.5-VL-3B", 10.75)):
        log = next(x for x in LOGS if x.name.startswith(name))
        model = model_config(log.model, log.config)
        below = instance_memory(
            model, total_bytes(log), log.util, shape(log), int((threshold - 0.05) * GIB)
        )
        above = instance_memory(
            model, total_bytes(log), log.util, shape(log), int((threshold + 0.05) * GIB)
        )
        assert below.fits and not above.fits, name


def test_suggestions_respect_memory_held_by_others() -> None:
    # 60 GiB held on an 80 GB A100: vLLM 0.10.1 refuses util 0.4 (and 0.95 all the more); what
    # the plan suggests must start with that memory in use
    model = model_config("Qwen/Qwen3-8B")
    gpu = find_gpu("A100-80GB")
    used = 60 * GIB
    shape = Shape(max_model_len=40960, gpu=gpu.name, engine="0.10.1")
    found = alternatives(model, gpu.usable_bytes, shape, 0.4, used=used)
    assert found and not any(a.change.startswith("--gpu-memory-utilization 0.95") for a in found)
    for alt in found:
        assert "0.24" in alt.change, alt.change  # the most the free memory allows
        assert instance_memory(model, gpu.usable_bytes, 0.24, alt.shape, used).fits
