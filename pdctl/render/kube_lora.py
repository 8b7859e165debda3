"""LoRA adapters in engine pods (docs/lora.md): a read-only volume per `claim` or `image`
adapter at /adapters/<name>, and for `hf` adapters pinned at a revision an emptyDir at
/root/.cache/pdctl-adapters filled by one init container per adapter (the engine's image, its
huggingface_hub). `hf` adapters without a revision are fetched by vLLM into the model cache."""

from __future__ import annotations

from typing import Any

from pdctl.plan.model import Plan
from pdctl.spec.lora import (
    FETCH_CODE,
    FETCHED_IN_ROOT,
    MOUNTED,
    fetched,
    folder,
    safe,
)

Obj = dict[str, Any]
FETCHED_VOLUME = "lora-fetched"


def _mounted(plan: Plan) -> list[tuple[int, Any]]:
    lora = plan.spec.model.lora
    if lora is None:
        return []
    return [(i, a) for i, a in enumerate(lora.adapters) if a.claim or a.image]


def lora_volumes(plan: Plan) -> list[Obj]:
    out: list[Obj] = []
    for i, a in _mounted(plan):
        if a.claim:
            source: Obj = {"persistentVolumeClaim": {"claimName": a.claim, "readOnly": True}}
        else:
            source = {"image": {"reference": a.image, "pullPolicy": "IfNotPresent"}}
        out.append({"name": f"lora-{i}", **source})
    if fetched(plan.spec.model.lora):
        out.append({"name": FETCHED_VOLUME, "emptyDir": {}})
    return out


def lora_mounts(plan: Plan) -> list[Obj]:
    out: list[Obj] = []
    for i, a in _mounted(plan):
        mount: Obj = {"name": f"lora-{i}", "mountPath": f"{MOUNTED}/{safe(a.name)}"}
        if a.sub_path:
            mount["subPath"] = a.sub_path
        out.append({**mount, "readOnly": True})
    if fetched(plan.spec.model.lora):
        out.append({"name": FETCHED_VOLUME, "mountPath": FETCHED_IN_ROOT, "readOnly": True})
    return out


def fetch_containers(plan: Plan, env: list[Obj], security: Obj) -> list[Obj]:
    """One init container per adapter pinned at a revision (`env`: the engine's, for
    HF_TOKEN; `security`: the engine container's securityContext)."""
    out = []
    for i, a in enumerate(fetched(plan.spec.model.lora)):
        dest = f"{FETCHED_IN_ROOT}/{folder(a)}"
        out.append(
            {
                "name": f"fetch-adapter-{i}",
                "image": plan.image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["python3", "-c", FETCH_CODE, a.hf, a.revision, dest],
                "env": [e for e in env if e["name"] == "HF_TOKEN"],
                "volumeMounts": [{"name": FETCHED_VOLUME, "mountPath": FETCHED_IN_ROOT}],
                "securityContext": security,
            }
        )
    return out
