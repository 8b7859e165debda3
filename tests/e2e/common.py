"""Specs and checks shared by the e2e tests."""

from __future__ import annotations

import json
import os
import re
import urllib.request
from pathlib import Path

from tests.e2e.conftest import VllmCpu
from tests.helpers import known
from tests.targets.testbed import SshEnv, host_entry, listening, pdctl, processes_in

# vllm_cpu.md: eager mode, float32, a 1 GiB KV cache, offline; one core per engine.
ENGINE_ENV = {
    "VLLM_CPU_KVCACHE_SPACE": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}
START_TIMEOUT = "600"
PROMPT = (
    "the quick brown fox jumps over the lazy dog the quick brown fox jumps over the lazy "
    "dog vllm cpu deploy prefill decode cache token model server request router host "
    "engine spec plan render apply health metric port"
)


# NIXL with kv_buffer_device cpu: the KV blocks go over UCX on loopback. PYTHONPATH: NIXL's
# progress thread sleeps between polls instead of spinning a core (nixl_idle/sitecustomize.py).
NIXL_IDLE = str(Path(__file__).resolve().parent / "nixl_idle")
UCX = {"UCX_TLS": "sm,self,tcp", "UCX_NET_DEVICES": "lo", "PYTHONPATH": NIXL_IDLE}


def model_section(vllm: VllmCpu, name: str | None = None) -> dict:
    return {
        "name": name or str(vllm.model),
        "servedName": "tiny",
        "maxModelLen": 256,
        "dtype": "float32",
    }


def host(env: SshEnv, vllm: VllmCpu, data: Path, name: str = "lo1") -> dict:
    return host_entry(env, env.host(name), data, venv=str(vllm.venv))


def phase0_spec(vllm: VllmCpu, name: str, port: int, hosts: list[dict],
                serve: dict | None = None, replicas: int | None = None,
                secrets: dict | None = None, **sections: object) -> dict:
    """Phase 0 of CPU engines (one core each, eager) on `hosts` at `port`; `serve` adds to the
    serve section, `sections` replace the spec's own (model, engine) or follow them."""
    serve = {"replicas": replicas, "port": port, "enforceEager": True, **(serve or {})}
    spec = {
        "name": name,
        "phase": 0,
        "model": model_section(vllm),
        "engine": {"device": "cpu", "env": {**ENGINE_ENV, "VLLM_CPU_OMP_THREADS_BIND": "0"}},
        "secrets": secrets,
        "hosts": hosts,
        "serve": {k: v for k, v in serve.items() if v is not None},
    }
    return {k: v for k, v in spec.items() if v is not None} | sections


def pd_spec(vllm: VllmCpu, env: SshEnv, data: Path, name: str, ports: tuple[int, ...]) -> dict:
    """Phase 2 on lo1: one prefill and one decode (a core each, NIXL over UCX) behind
    vllm-router; `ports`: prefill, decode, router, router metrics. The engines require
    secrets.apiKey, read from $PDCTL_E2E_API_KEY."""
    prefill, decode, router, metrics = ports
    return {
        "name": name,
        "phase": 2,
        "model": model_section(vllm),
        "engine": {"device": "cpu", "env": {**ENGINE_ENV, **UCX}},
        "hosts": [host(env, vllm, data)],
        # The CPU attention backend needs a block size that is a multiple of 32.
        "prefill": {
            "replicas": 1,
            "port": prefill,
            "enforceEager": True,
            "env": {"VLLM_CPU_OMP_THREADS_BIND": "0"},
            "extraArgs": ["--block-size", "32"],
        },
        "decode": {
            "replicas": 1,
            "port": decode,
            "enforceEager": True,
            "env": {"VLLM_CPU_OMP_THREADS_BIND": "1"},
            "extraArgs": ["--block-size", "32"],
        },
        "disaggregation": {"connector": "nixl", "kvBufferDevice": "cpu"},
        "secrets": {"apiKey": {"env": "PDCTL_E2E_API_KEY"}},
        "router": {
            "port": router,
            "metricsPort": metrics,
            "venv": str(vllm.router),
            "healthCheckIntervalSecs": 2,
        },
    }


def routed_spec(vllm: VllmCpu, env: SshEnv, data: Path, name: str,
                ports: tuple[int, int, int]) -> dict:
    """Phase 0: two CPU replicas on lo1 behind vllm-router (round robin); ports: the first
    replica's (the second takes the next), the router's and its metrics'."""
    serve, router, metrics = ports
    return phase0_spec(
        vllm, name, serve, [{**host(env, vllm, data), "instances": 2}], replicas=2,
        router={"port": router, "metricsPort": metrics, "venv": str(vllm.router),
                "policy": "round_robin", "healthCheckIntervalSecs": 2},
    )


def up(spec: Path, env: SshEnv, extra_env: dict[str, str] | None = None):
    return pdctl(
        "up",
        str(spec),
        "--yes",
        "--timeout",
        START_TIMEOUT,
        *known(env),
        env=extra_env,
        timeout=900,
    )


def printed_urls(output: str) -> list[str]:
    return re.findall(r"(http://\S+/v1)\s", output)


def complete(
    base_url: str, prompt: str = PROMPT, max_tokens: int = 8, timeout: float = 120
) -> dict:
    body = json.dumps({"model": "tiny", "prompt": prompt, "max_tokens": max_tokens}).encode()
    req = urllib.request.Request(
        f"{base_url}/completions", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as resp:
        return resp.read().decode()


def assert_nothing_left(data_dir: Path, ports: list[int]) -> None:
    """No process runs from the deployment's folders, no port listens, no file remains."""
    assert processes_in(data_dir) == []
    for port in ports:
        assert not listening(port), f"port {port} still listening"
    assert not data_dir.exists(), sorted(str(p) for p in data_dir.rglob("*"))


def down(spec: Path, *args: str, env: dict[str, str] | None = None) -> None:
    """A fixture's teardown: `pdctl down`, once more if it failed (a loaded 2-core machine has
    made an SSH read outlast its 60 s); if the deployment's engines still run after that, they
    are killed (they would slow every later test) and the teardown fails, saying why."""
    import signal
    import time

    outs = []
    for attempt in (1, 2):
        ran = pdctl("down", str(spec), *args, env=env, timeout=600)
        if ran.returncode == 0:
            return
        outs.append(f"down #{attempt} exited {ran.returncode}: {ran.stderr.strip()[-600:]}")
        time.sleep(5)
    left = processes_in(spec.parent)
    for row in left:
        try:
            os.kill(int(row.split(":", 1)[0]), signal.SIGKILL)
        except OSError:
            pass
    raise AssertionError("; ".join(outs) + f"; killed what still ran: {left}")
