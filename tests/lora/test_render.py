"""LoRA renders on every phase and target: the pinned flags, the same adapters on prefill and
decode, adapter volumes under strict Kubernetes validation, host scripts under shellcheck."""

from __future__ import annotations

import json
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from pdctl.plan import make_plan
from pdctl.plan.lora import lora_args
from pdctl.render import render
from pdctl.spec import load_text
from tests.conftest import EXAMPLES, check_scripts
from tests.lora.specs import BASES, bundle, load

ADAPTERS = [
    {"name": "sql", "hf": "org/sql-lora", "rank": 8},
    {
        "name": "chat", "hf": "org/chat-lora", "revision": "v2",
        "baseModel": "meta-llama/Llama-3.1-8B-Instruct",
    },
]
HOST_ONLY = {"name": "local", "path": "/srv/adapters/local"}
KUBE_ONLY = [
    {"name": "pvc", "claim": "adapters", "subPath": "pvc"},
    {"name": "img", "image": "registry.example.com/adapters/img:v1"},
]
LORA = {"maxLoras": 2, "maxLoraRank": 16, "maxCpuLoras": 8}


def lora_of(base: str) -> dict:
    kube = base in ("phase1", "phase2-llmd")
    return {**LORA, "adapters": ADAPTERS + (KUBE_ONLY if kube else [HOST_ONLY])}


def engine_args(plan) -> dict[str, tuple[str, ...]]:
    return {i.name: i.args for i in plan.instances if i.role in ("serve", "prefill", "decode")}


def lora_part(args: tuple[str, ...]) -> tuple[str, ...]:
    start = args.index("--enable-lora")
    end = args.index("--lora-modules") + 1
    while end < len(args) and not args[end].startswith("--"):
        end += 1
    return args[start:end]


@pytest.mark.parametrize("version", ["0.23.0", "0.33.0"])
@pytest.mark.parametrize("base", sorted(BASES))
def test_every_engine_gets_the_same_pinned_lora_flags(base: str, version: str) -> None:
    plan, _ = bundle(base, lora_of(base), engine={"version": version})
    parts = {lora_part(a) for a in engine_args(plan).values()}
    assert len(parts) == 1, parts  # prefill and decode serve the same adapters
    (part,) = parts
    assert part[:7] == (
        "--enable-lora", "--max-loras", "2", "--max-lora-rank", "16", "--max-cpu-loras", "8",
    )
    for arg in part:
        if arg.startswith("--"):
            assert plan.release.has_flag(arg), (arg, version)
    modules = part[part.index("--lora-modules") + 1 :]
    assert modules[0] == "sql=org/sql-lora"
    chat = json.loads(modules[1])
    assert chat == {
        "name": "chat", "path": "~/.cache/pdctl-adapters/chat_v2",
        "base_model_name": "meta-llama/Llama-3.1-8B-Instruct",
    }
    if base.startswith(("phase1", "phase2-llmd")):
        assert modules[2:] == ("pvc=/adapters/pvc", "img=/adapters/img")
    else:
        assert modules[2:] == ("local=/srv/adapters/local",)


def test_no_lora_section_no_lora_flags() -> None:
    spec = load("phase0", {})
    spec = spec.model_copy(update={"model": spec.model.model_copy(update={"lora": None})})
    assert lora_args(spec) == []


@pytest.mark.parametrize("base", ["phase1", "phase2-llmd"])
def test_kubernetes_adapter_volumes_validate_strictly(base: str) -> None:
    plan, b = bundle(base, lora_of(base))
    docs = [d for d in yaml.safe_load_all(b.stream()) if d]
    engines = [d for d in docs if d["kind"] == "Deployment" and "epp" not in d["metadata"]["name"]]
    assert engines
    for doc in engines:
        # Image volumes are in the pod schema from Kubernetes 1.31.
        kubernetes_validate.validate(doc, "1.33.0", strict=True)
        pod = doc["spec"]["template"]["spec"]
        vols = {v["name"]: v for v in pod["volumes"]}
        assert vols["lora-2"]["persistentVolumeClaim"] == {
            "claimName": "adapters", "readOnly": True,
        }
        assert vols["lora-3"]["image"]["reference"] == "registry.example.com/adapters/img:v1"
        assert vols["lora-fetched"] == {"name": "lora-fetched", "emptyDir": {}}
        engine = next(c for c in pod["containers"] if c["name"] == "vllm")
        mounts = {m["mountPath"]: m for m in engine["volumeMounts"]}
        assert mounts["/adapters/pvc"]["subPath"] == "pvc" and mounts["/adapters/pvc"]["readOnly"]
        assert mounts["/adapters/img"]["readOnly"]
        assert mounts["/root/.cache/pdctl-adapters"]["readOnly"]
        fetch = pod["initContainers"][0]
        assert fetch["name"] == "fetch-adapter-0"
        assert fetch["command"][3:] == [
            "org/chat-lora", "v2", "/root/.cache/pdctl-adapters/chat_v2",
        ]
        assert fetch["image"] == engine["image"]


def test_llmd_epp_scores_lora_affinity_only_with_adapters() -> None:
    def epp(lora: dict | None) -> dict:
        plan, b = bundle("phase2-llmd", lora or {})
        docs = [d for d in yaml.safe_load_all(b.stream()) if d]
        cm = next(d for d in docs if d["kind"] == "ConfigMap" and "epp" in d["metadata"]["name"])
        return yaml.safe_load(next(iter(cm["data"].values())))

    with_lora = epp(lora_of("phase2-llmd"))
    assert {"type": "lora-affinity-scorer"} in with_lora["plugins"]
    for profile in with_lora["schedulingProfiles"]:
        assert {"pluginRef": "lora-affinity-scorer", "weight": 1} in profile["plugins"]


@pytest.mark.parametrize("base", ["phase0", "phase0-docker", "phase2-hosts"])
def test_host_scripts_fetch_pinned_adapters_and_pass_shellcheck(base: str, tmp_path: Path) -> None:
    plan, b = bundle(base, lora_of(base))
    scripts = {a.path: a.text for a in b if a.path.endswith(".sh")}
    check_scripts(scripts, tmp_path)
    starts = {p: t for p, t in scripts.items() if p.endswith("start.sh") and "router" not in p}
    assert starts
    for text in starts.values():
        assert "fetching LoRA adapter org/chat-lora at v2" in text
        assert "org/sql-lora" not in text.split("fetching", 1)[1].split("--lora-modules")[0]
        if base == "phase0-docker":
            assert '-v "$HOME"/.cache/pdctl-adapters:/root/.cache/pdctl-adapters:ro' in text
            assert "-v /srv/adapters/local:/srv/adapters/local:ro" in text
            assert "docker run --rm --entrypoint python3" in text
        else:
            assert "HF_HOME=" in text and "python3 -c" in text


def test_runtime_loading_sets_the_switch_only_when_asked() -> None:
    key = {"apiKey": {"env": "KEY"}}
    plan, _ = bundle("phase2-hosts", {"runtimeLoading": True}, secrets=key)
    for inst in plan.instances:
        if inst.role in ("prefill", "decode"):
            assert ("VLLM_ALLOW_RUNTIME_LORA_UPDATING", "True") in inst.env
    plan, _ = bundle("phase2-hosts", {}, secrets=key)
    assert all("VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in dict(i.env) for i in plan.instances)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_with_an_adapter_renders_it_on_every_engine(example: Path) -> None:
    """Every shipped example (each phase, target, runtime, connector, LWS, HAMi) with one
    adapter added: every engine, workers of a group included, gets the same LoRA flags."""
    data = yaml.safe_load(example.read_text())
    data["model"]["lora"] = {"maxLoras": 2, "adapters": [{"name": "sql", "hf": "org/sql-lora"}]}
    spec, _ = load_text(yaml.safe_dump(data), example.name)
    plan = make_plan(spec)
    b = render(plan)
    engines = [i for i in plan.instances if i.role in ("serve", "prefill", "decode")]
    engines += [w for i in engines for w in i.workers]
    assert engines
    parts = {lora_part(i.args) for i in engines}
    assert parts == {
        (
            "--enable-lora", "--max-loras", "2", "--max-lora-rank", "16", "--lora-modules",
            "sql=org/sql-lora",
        )
    }
    assert "sql=org/sql-lora" in b.stream()
