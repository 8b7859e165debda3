"""Speculative decoding and KV offloading (issue 37) reach every target alike: the `vllm serve`
words in the rendered files of a host venv (serve.sh), a host Docker container (start.sh's
`docker run`) and a Kubernetes pod (the vllm container's command and args) carry the same
--speculative-config, --kv-offloading-* and offloading connector, and the same LMCache
variables, for a single engine (phase 0 on hosts, phase 1 on Kubernetes) and for
prefill/decode behind NIXL (phase 2).

The argv is read back from the rendered text with shlex, as the shell will split it."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text

HOSTS = {
    "venv": "runtime: venv, venv: /opt/vllm",
    "docker": "runtime: docker",
}
SPEC = """name: feat
phase: PHASE
model: {name: meta-llama/Llama-3.1-8B-Instruct, maxModelLen: 8192}
engine: {version: "VERSION", kvOffload: OFFLOAD}
hosts:
  - {name: gpu-a, address: 192.0.2.10, user: ubuntu, gpus: [0, 1, 2, 3], RUNTIME}
ROLES"""
PHASE1 = """serve:
  replicas: 1
  speculative: {method: eagle3, model: yuhuili/EAGLE3-LLaMA3.1-Instruct-8B,
                numSpeculativeTokens: 3, draftTensorParallel: 1}
"""
PHASE2 = """prefill: {replicas: 1}
decode:
  replicas: 1
  speculative: {method: ngram, numSpeculativeTokens: 4, promptLookupMin: 2, promptLookupMax: 3}
disaggregation: {connector: nixl}
router: {venv: /opt/vllm-router}
kubernetes:
  storage: {accessMode: ReadWriteMany}
"""
# the flags these features render; the P/D connector's own keys differ per target (addresses)
FLAGS = ("--speculative-config", "--kv-offloading-size", "--kv-offloading-backend")
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def spec_text(phase: int, version: str, offload: str, runtime: str) -> str:
    return (
        SPEC.replace("PHASE", str(phase)).replace("VERSION", version)
        .replace("OFFLOAD", offload).replace("RUNTIME", HOSTS[runtime])
        .replace("ROLES", PHASE1 if phase == 1 else PHASE2)
    )


def serve_words(words: list[str]) -> list[str]:
    """The words from the model (the first argument of `vllm serve`) to the end of the
    command (a redirection ends docker run's)."""
    start = words.index(MODEL)
    rest = words[start:]
    for i, word in enumerate(rest):
        if word.startswith(">"):
            return rest[:i]
    return rest


def logical_lines(text: str) -> list[str]:
    return text.replace("\\\n", " ").splitlines()


def host_engines(text: str, runtime: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    """{role: (serve words, LMCACHE_* variables)} of a hosts bundle's engines."""
    spec = load_text(text, "s.yaml")[0]
    plan = make_plan(spec, phase=0 if spec.phase == 1 else None, target="hosts")
    bundle = render(plan)
    found: dict[str, tuple[list[str], dict[str, str]]] = {}
    for inst in plan.instances:
        if inst.role == "router":
            continue
        base = f"hosts/gpu-a/{inst.name}"
        script = bundle[f"{base}/serve.sh" if runtime == "venv" else f"{base}/start.sh"]
        env: dict[str, str] = {}
        words: list[str] | None = None
        for line in logical_lines(script):
            if runtime == "venv" and line.startswith("export LMCACHE_"):
                key, value = shlex.split(line)[1].split("=", 1)
                env[key] = value
            if runtime == "venv" and line.startswith("exec vllm serve "):
                words = serve_words(shlex.split(line))
            if runtime == "docker" and line.startswith("docker run "):
                split = shlex.split(line)
                words = serve_words(split)
                for i, word in enumerate(split[:-1]):
                    if word in ("--env", "-e") and split[i + 1].startswith("LMCACHE_"):
                        key, value = split[i + 1].split("=", 1)
                        env[key] = value
        assert words is not None, script
        found[inst.role] = (words, env)
    return found


def kube_engines(text: str) -> dict[str, tuple[list[str], dict[str, str]]]:
    plan = make_plan(load_text(text, "s.yaml")[0], target="kubernetes")
    found: dict[str, tuple[list[str], dict[str, str]]] = {}
    for obj in render(plan).objects:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        for c in pod.get("containers", []):
            words = [*c.get("command", []), *c.get("args", [])]
            if MODEL not in words:
                continue
            # a shell wrapper (sh -c '... vllm serve ...') is split as the shell would
            if MODEL not in words[:1] and any(" " + MODEL + " " in w for w in words):
                (script,) = [w for w in words if " " + MODEL + " " in w]
                words = shlex.split(script.replace("\\\n", " "))
            env = {e["name"]: e.get("value", "") for e in c.get("env", [])}
            role = obj["metadata"]["name"].removeprefix("feat-")
            found[role] = (
                serve_words(words), {k: v for k, v in env.items() if k.startswith("LMCACHE_")},
            )
    return found


def features(words: list[str]) -> dict[str, Any]:
    """The rendered values of FLAGS, and the non-P/D parts of --kv-transfer-config."""
    got: dict[str, Any] = {}
    for i, word in enumerate(words[:-1]):
        if word in FLAGS:
            assert word not in got, words  # each flag once
            got[word] = json.loads(words[i + 1]) if word == FLAGS[0] else words[i + 1]
        if word == "--kv-transfer-config":
            doc = json.loads(words[i + 1])
            parts = doc.get("kv_connector_extra_config", {}).get("connectors", [doc])
            got["connectors"] = [p["kv_connector"] for p in parts]
            got["offload"] = [p for p in parts if p["kv_connector"] != "NixlConnector"]
    return got


CASES = [
    (phase, version, offload)
    for phase in (1, 2)
    for version in ("0.23.0", "0.33.0")
    for offload in ("{sizeGib: 16}", "{sizeGib: 8, backend: lmcache}")
]


@pytest.mark.parametrize(("phase", "version", "offload"), CASES)
def test_hosts_docker_and_kubernetes_engines_get_the_same_flags(
    phase: int, version: str, offload: str
) -> None:
    venv = host_engines(spec_text(phase, version, offload, "venv"), "venv")
    docker = host_engines(spec_text(phase, version, offload, "docker"), "docker")
    kube = kube_engines(spec_text(phase, version, offload, "venv"))
    roles = {"serve"} if phase == 1 else {"prefill", "decode"}
    assert set(venv) == set(docker) == roles, (venv, docker)
    assert set(kube) >= roles, kube
    lmcache = "lmcache" in offload
    for role in roles:
        want = features(venv[role][0])
        # what the spec asks for is there on hosts (the reference the others are held to)
        if role in ("serve", "decode"):
            assert FLAGS[0] in want, venv[role][0]
        else:
            assert FLAGS[0] not in want, venv[role][0]
        if lmcache:
            assert "LMCacheConnectorV1" in want["connectors"], want
            assert venv[role][1] == {
                "LMCACHE_LOCAL_CPU": "True", "LMCACHE_MAX_LOCAL_CPU_SIZE": "8",
            }
        elif phase == 1:
            assert want["--kv-offloading-size"] == "16", want
            assert want["--kv-offloading-backend"] == "native", want
        else:
            assert want["connectors"] == ["NixlConnector", "OffloadingConnector"], want
            assert want["offload"][0]["kv_connector_extra_config"] == {
                "cpu_bytes_to_use": 16 << 30,
            }
        assert features(docker[role][0]) == want, (role, docker[role][0])
        assert features(kube[role][0]) == want, (role, kube[role][0])
        assert docker[role][1] == venv[role][1], role
        assert kube[role][1] == venv[role][1], role
