"""LoRA adapters in the plan (docs/lora.md): the `vllm serve` flags, the adapters' paths as the
engine sees them, the run-time loading switch, and what each target can mount.

One rule for every phase: every engine serves the same adapters with the same flags. In P/D the
KV a prefill engine computes under an adapter is only valid for decoding under that adapter
(the adapter changes the K and V projections), so prefill and decode must both hold it; the
router forwards the request's `model` (the adapter's name) unchanged to both."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pdctl.errors import SpecError, UsageError
from pdctl.spec.lora import FETCHED, MOUNTED, Adapter, folder, safe
from pdctl.spec.model import Spec

if TYPE_CHECKING:
    from pdctl.plan.model import Plan

RUNTIME_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"


def adapter_path(adapter: Adapter) -> str:
    """Where the engine loads the adapter from (the same on every target that can mount it)."""
    if adapter.hf is not None:
        return adapter.hf if adapter.revision is None else f"{FETCHED}/{folder(adapter)}"
    if adapter.path is not None:
        return adapter.path
    return f"{MOUNTED}/{safe(adapter.name)}"


def lora_module(adapter: Adapter, served: str) -> str:
    """One `--lora-modules` value: `name=path`, or the JSON form (LoRAModulePath {name, path,
    base_model_name}) when the adapter names its base model or its path holds '=' or ','.
    vLLM's LoRAParserAction reads `name=path` when the value holds '=' and no ',', else JSON;
    0.23.0 splits that form on every '=' (`name, path = item.split("=")`:
    vllm/entrypoints/openai/cli_args.py l.52-53), so a path with '=' failed to start the
    engine ("too many values to unpack"); 0.33.0 splits once (entrypoints/common/cli_args.py
    l.55-56). A path with ',' sends either version to JSON, which `name=path` is not. The
    JSON form holds any path on both (its ',' sends it there), so pdctl writes it instead of
    refusing the path."""
    path = adapter_path(adapter)
    if adapter.base_model is None and "=" not in path and "," not in path:
        return f"{adapter.name}={path}"
    data: dict[str, str] = {"name": adapter.name, "path": path}
    if adapter.base_model is not None:
        data["base_model_name"] = served
    return json.dumps(data, separators=(",", ":"))


def lora_args(spec: Spec) -> list[str]:
    """`--enable-lora --max-loras N --max-lora-rank R [--max-cpu-loras C] [--lora-modules ...]`
    (each flag is in pdctl/data/vllm_flags_*.txt: vllm/engine/arg_utils.py, cli_args.py)."""
    lora = spec.model.lora
    if lora is None:
        return []
    args = ["--enable-lora", "--max-loras", str(lora.max_loras)]
    args += ["--max-lora-rank", str(lora.max_lora_rank)]
    if lora.max_cpu_loras is not None:
        args += ["--max-cpu-loras", str(lora.max_cpu_loras)]
    if lora.adapters:
        served = spec.model.served_name or spec.model.name
        args += ["--lora-modules", *(lora_module(a, served) for a in lora.adapters)]
    return args


def lora_env(spec: Spec) -> dict[str, str]:
    """Run-time loading on: vLLM's /v1/load_lora_adapter and /v1/unload_lora_adapter exist
    only with VLLM_ALLOW_RUNTIME_LORA_UPDATING true (vllm/envs.py)."""
    lora = spec.model.lora
    return {RUNTIME_ENV: "True"} if lora is not None and lora.runtime_loading else {}


def check_lora(spec: Spec, target: str) -> None:
    """What the target cannot mount, and run-time loading without the API key."""
    lora = spec.model.lora
    if lora is None:
        return
    if lora.runtime_loading and spec.secrets.api_key is None:
        raise SpecError(
            "runtimeLoading opens /v1/load_lora_adapter (an admin surface: it loads files from "
            "the engine's disk or the Hub) on engines reachable without an API key",
            path="model.lora.runtimeLoading",
            fix="set secrets.apiKey, or remove runtimeLoading (docs/security.md)",
        )
    for i, a in enumerate(lora.adapters):
        where = f"model.lora.adapters[{i}].{a.source}"
        if target == "kubernetes" and a.path is not None:
            raise SpecError(
                f"adapter {a.name}: a host path cannot be mounted into Kubernetes pods", path=where,
                fix="put the adapter in a PersistentVolumeClaim (`claim`), an OCI image "
                "(`image`) or on the Hub (`hf`)",
            )
        if target == "hosts" and (a.claim is not None or a.image is not None):
            what = (
                "a PersistentVolumeClaim is a Kubernetes volume" if a.claim is not None else
                "an OCI image source is a Kubernetes image volume (Kubernetes 1.31+, feature "
                "ImageVolume)"
            )
            raise SpecError(
                f"adapter {a.name}: {what}; hosts cannot mount it", path=where,
                fix="copy the adapter to the hosts and give its folder as `path`, or use `hf`",
            )


def check_adapters_call(plan: Plan, action: str, name: str | None) -> None:
    """`pdctl adapters ACTION [NAME]` reaches the engines pdctl started on hosts (plan.units;
    none on Kubernetes); load and unload need run-time loading; an adapter cannot take the
    served model's name."""
    spec = plan.spec
    if not plan.units:
        raise UsageError(
            "pdctl adapters reaches engines on hosts; on Kubernetes the API server's proxy "
            "drops the Authorization header the API key needs",
            fix="kubectl port-forward a pod and POST to /v1/load_lora_adapter (docs/lora.md)",
        )
    lora = spec.model.lora
    if action != "list" and (lora is None or not lora.runtime_loading):
        raise SpecError(
            f"adapters {action} needs run-time loading, which this spec leaves off",
            path="model.lora.runtimeLoading" if lora is not None else "model.lora",
            fix="set model.lora.runtimeLoading: true (with secrets.apiKey) and run pdctl up",
        )
    served = spec.model.served_name or spec.model.name
    if name is not None and name in (served, spec.model.name):
        raise UsageError(f"{name!r} is the served model's name; choose another adapter name")
