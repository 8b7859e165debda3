"""An example of examples/ changed, its plan and rendered objects, and a KubeTarget on the
kmock cluster: the inputs the Kubernetes target tests share."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from pdctl.targets.kube.target import KubeTarget

ROOT = Path(__file__).resolve().parents[3]


def merged(base: dict, over: dict) -> dict:
    """`base` with `over` written in, mapping into mapping (a non-mapping value replaces)."""
    out = dict(base)
    for key, value in over.items():
        both = isinstance(value, dict) and isinstance(out.get(key), dict)
        out[key] = merged(out[key], value) if both else value
    return out


def example_data(example: str, **over: Any) -> dict:
    """examples/`example`.yaml as data, `over` merged in."""
    return merged(yaml.safe_load((ROOT / "examples" / f"{example}.yaml").read_text()), over)


def plan_objects(data: dict, **how: Any) -> tuple[Any, list[dict]]:
    """The plan of spec `data` (make_plan's `how`: phase, target) and its rendered objects."""
    spec, _ = load_text(yaml.safe_dump(data), "spec.yaml")
    plan = make_plan(spec, **how)
    return plan, list(render(plan).objects)


def kube_target(url: str, plan: Any, **kw: Any) -> KubeTarget:
    """A KubeTarget of `plan`'s deployment on the cluster at `url`."""
    from kubernetes import client

    api = client.ApiClient(client.Configuration(host=url))
    return KubeTarget(api, plan.name, plan.spec.kubernetes.namespace, **kw)


def roll_out(tgt: KubeTarget, name: str) -> None:
    """Write Deployment `name`'s status as its controller would once every replica is ready."""
    dep = tgt.get("Deployment", name)
    replicas = dep["spec"].get("replicas", 1)
    status = {
        "observedGeneration": dep["metadata"].get("generation", 1), "replicas": replicas,
        "updatedReplicas": replicas, "availableReplicas": replicas, "readyReplicas": replicas,
    }
    path = tgt._path("Deployment", name)
    tgt._call("PATCH", path, {"status": status}, content_type="application/merge-patch+json")
