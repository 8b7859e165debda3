"""Speculative decoding (`serve/prefill/decode.speculative`) and KV offloading
(`engine.kvOffload`), issue 37 items 1-2: what each target's engines are given, for both
pinned vLLM versions, and the combinations refused with one located line (exit 2).

The JSON keys are vLLM's SpeculativeConfig fields and the offloading connectors' documents
(vllm/config/speculative.py, vllm/config/vllm.py `_post_init_kv_transfer_config`, v0.23.0 and
v0.33.0), written out here independently of pdctl's code."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml
from kubernetes_validate import validate as kube_validate

from pdctl.errors import SpecError
from pdctl.render import render
from tests.conftest import K8S_VERSION
from tests.helpers import data, plan_of, run_cli

VERSIONS = ("0.23.0", "0.33.0")
HOSTS = """
hosts:
  - {name: gpu-a, address: 192.0.2.10, user: ubuntu, gpus: [0, 1, 2, 3], runtime: RUNTIME}
"""


def spec_text(version: str, serve: str, engine: str = "", runtime: str = "venv") -> str:
    venv = ", venv: /opt/vllm" if runtime == "venv" else ""
    hosts = HOSTS.replace("runtime: RUNTIME", f"runtime: {runtime}{venv}")
    return (
        f"name: feat\nphase: 0\nmodel: {{name: Qwen/Qwen3-8B}}\n"
        f'engine: {{version: "{version}"{engine}}}\n{hosts}serve:\n{serve}'
    )


def arg_after(args: tuple[str, ...], flag: str) -> str:
    assert args.count(flag) == 1, args
    return args[args.index(flag) + 1]


@pytest.mark.parametrize("version", VERSIONS)
def test_ngram_renders_vllm_keys_on_hosts_and_docker(version: str) -> None:
    serve = (
        "  replicas: 1\n  speculative: {method: ngram, numSpeculativeTokens: 4,"
        " promptLookupMin: 2, promptLookupMax: 5}\n"
    )
    for runtime in ("venv", "docker"):
        plan = plan_of(spec_text(version, serve, runtime=runtime))
        (inst,) = plan.instances
        doc = json.loads(arg_after(inst.args, "--speculative-config"))
        assert doc == {
            "method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 2,
            "prompt_lookup_max": 5,
        }
        # what the host runs: the JSON is one shell word, unchanged
        bundle = render(plan)
        scripts = [bundle[p] for p in bundle.paths() if p.endswith(".sh")]
        assert scripts
        words = [w for text in scripts for w in shlex.split(text, comments=True)]
        assert json.dumps(doc, separators=(",", ":")) in words


@pytest.mark.parametrize("version", VERSIONS)
def test_eagle3_draft_and_draft_tp(version: str) -> None:
    serve = (
        "  tensorParallel: 2\n  speculative: {method: eagle3, model: org/eagle3-head,"
        " numSpeculativeTokens: 3, draftTensorParallel: 1}\n"
    )
    (inst,) = plan_of(spec_text(version, serve)).instances
    assert json.loads(arg_after(inst.args, "--speculative-config")) == {
        "method": "eagle3", "model": "org/eagle3-head", "num_speculative_tokens": 3,
        "draft_tensor_parallel_size": 1,
    }


def test_mtp_without_model_uses_the_target() -> None:
    serve = "  speculative: {method: mtp, numSpeculativeTokens: 1}\n"
    (inst,) = plan_of(spec_text("0.33.0", serve)).instances
    assert json.loads(arg_after(inst.args, "--speculative-config")) == {
        "method": "mtp", "num_speculative_tokens": 1,
    }


FEATURES = data("refusals.yaml")["features"]
BAD = [(c["serve"], c.get("engine", ""), c["path"], c["what"]) for c in FEATURES]


@pytest.mark.parametrize(("serve", "engine", "path", "what"), BAD)
def test_invalid_combinations_are_refused_where_written(
    serve: str, engine: str, path: str, what: str
) -> None:
    with pytest.raises(SpecError) as info:
        plan_of(spec_text("0.33.0", serve, engine))
    assert info.value.path == path and what in info.value.message, info.value


def test_cli_says_one_located_line_and_exits_2(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "s.yaml"
    bad = "  speculative: {method: eagle, numSpeculativeTokens: 3}\n"
    spec.write_text(spec_text("0.33.0", bad))
    code, out, err = run_cli(["validate", str(spec)], capsys)
    assert code == 2 and out == "", (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "serve.speculative" in lines[0] and str(spec) in lines[0], err
    assert "needs the draft checkpoint" in lines[0], err  # what, and the fix:
    assert "set `model:`" in lines[0], err
    assert "Traceback" not in err


@pytest.mark.parametrize("version", VERSIONS)
def test_native_offload_alone_uses_vllms_flags(version: str) -> None:
    engine = ", kvOffload: {sizeGib: 2.5}"
    (inst,) = plan_of(spec_text(version, "  replicas: 1\n", engine)).instances
    assert arg_after(inst.args, "--kv-offloading-size") == "2.5"
    assert arg_after(inst.args, "--kv-offloading-backend") == "native"
    assert "--kv-transfer-config" not in inst.args


def test_lmcache_alone_is_lmcache_connector_v1_sized_per_worker() -> None:
    engine = ", kvOffload: {sizeGib: 8, backend: lmcache}"
    (inst,) = plan_of(spec_text("0.23.0", "  tensorParallel: 2\n", engine)).instances
    assert json.loads(arg_after(inst.args, "--kv-transfer-config")) == {
        "kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both",
    }
    env = dict(inst.env)
    assert env["LMCACHE_LOCAL_CPU"] == "True"
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "4"  # 8 GiB over 2 TP workers
    assert "--kv-offloading-size" not in inst.args


STORE = Path(__file__).parents[2] / "examples/phase2-mooncake-store.yaml"


def test_offload_joins_the_mooncake_store_multiconnector() -> None:
    text = STORE.read_text().replace("engine:\n", "engine:\n  kvOffload: {sizeGib: 1}\n", 1)
    assert "kvOffload" in text
    for inst in plan_of(text).instances:
        if inst.role not in ("prefill", "decode"):
            continue
        doc = json.loads(arg_after(inst.args, "--kv-transfer-config"))
        assert doc["kv_connector"] == "MultiConnector"
        parts = doc["kv_connector_extra_config"]["connectors"]
        names = [p["kv_connector"] for p in parts]
        assert names == ["MooncakeConnector", "MooncakeStoreConnector", "OffloadingConnector"]
        assert parts[2] == {
            "kv_connector": "OffloadingConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"cpu_bytes_to_use": 1 << 30},
        }


def test_phase1_kubernetes_passes_strict_validation() -> None:
    text = (
        "name: feat\nphase: 1\nmodel: {name: Qwen/Qwen3-8B}\n"
        'engine: {version: "0.23.0", kvOffload: {sizeGib: 4, backend: lmcache}}\n'
        "serve:\n  speculative: {method: ngram, numSpeculativeTokens: 3}\n"
    )
    plan = plan_of(text)
    docs = [d for d in yaml.safe_load_all(render(plan).stream()) if d]
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert deployments
    for doc in docs:
        kube_validate(doc, K8S_VERSION, strict=True)
    (container,) = [
        c for c in deployments[0]["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm"
    ]
    words = [*container.get("command", []), *container.get("args", [])]
    assert '{"method":"ngram","num_speculative_tokens":3}' in words
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"] == "4"


def test_plan_shows_offload_host_memory_per_host_and_the_uncounted_draft(capsys) -> None:
    """examples/phase2-spec-offload.yaml: one prefill and one decode on gpu-a, 16 GiB each."""
    example = Path(__file__).parents[2] / "examples/phase2-spec-offload.yaml"
    code, out, err = run_cli(["plan", str(example), "-o", "json"], capsys)
    assert code in (0, 1), err
    warnings = json.loads(out)["warnings"]
    (offload,) = [w for w in warnings if w.startswith("engine.kvOffload")]
    assert offload.endswith("per host: gpu-a 32 GiB"), offload
    (draft,) = [w for w in warnings if w.startswith("decode.speculative (eagle3)")]
    assert "not counted" in draft


def test_plan_warns_when_the_offload_tier_fills_the_pods_memory_limit(capsys, tmp_path) -> None:
    spec = tmp_path / "s.yaml"
    text = (
        "name: feat\nphase: 1\nmodel: {name: Qwen/Qwen3-8B}\n"
        'engine: {version: "0.33.0", kvOffload: {sizeGib: SIZE}}\nserve: {replicas: 1}\n'
    )
    found = {}
    for size in ("80", "16"):  # the engine pods' default memory limit is 64Gi
        spec.write_text(text.replace("SIZE", size))
        code, out, err = run_cli(["plan", str(spec), "-o", "json"], capsys)
        assert code in (0, 1), err
        found[size] = [w for w in json.loads(out)["warnings"] if "OOM" in w]
    (line,) = found["80"]
    assert line.startswith("serve: its pods' memory limit 64Gi") and "OOM" in line
    assert found["16"] == []
