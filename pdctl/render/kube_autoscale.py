"""Per-role autoscalers for Kubernetes (docs/autoscaling.md): an autoscaling/v2
HorizontalPodAutoscaler on Pods metrics, or (`autoscaling.engine: keda`) a KEDA ScaledObject
with a Prometheus trigger on the engines' vLLM metrics. The scale target is the role's
Deployment, or its LeaderWorkerSet (a multi-node group; LWS has a scale subresource).

Metric names are vLLM's (v1 engine, `vllm/v1/metrics/loggers.py` of 0.23.0 l.462, l.520,
l.673; unchanged in 0.33.0): vllm:num_requests_waiting, vllm:kv_cache_usage_perc and the
counter vllm:request_success (exposed as vllm:request_success_total). Pure."""

from __future__ import annotations

from typing import Any

from pdctl.capacity import (
    adapt_traffic,
    spec_gpu,
    spec_model_config,
    spec_shape,
    spec_traffic,
)
from pdctl.capacity.report import plan_capacity
from pdctl.errors import SpecError
from pdctl.plan.autoscale import RoleTarget, targets
from pdctl.plan.model import Plan
from pdctl.render.kube import Obj, metadata

# metric -> (Prometheus sample, the Pods metric name a prometheus-adapter rule serves)
METRICS = {
    "waiting": ("vllm:num_requests_waiting", "vllm:num_requests_waiting"),
    "kvUsage": ("vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_perc"),
    "requestRate": ("vllm:request_success_total", "vllm:request_success_per_second"),
}
HOW = "pdctl.io/autoscale-target"  # annotation: how the target number was derived
SCALABLE = ("Deployment", "LeaderWorkerSet")


def capacity(plan: Plan) -> Any | None:
    """The capacity plan at the spec's workload (as `pdctl plan` computes it without
    options), or None where the render cannot know the model's shape (a `model.config` file,
    which only the CLI reads: every role then needs its `target`)."""
    spec = plan.spec
    if spec.model.config:
        return None
    try:
        model = spec_model_config(spec.model, None)
    except SpecError:
        return None
    device, _ = spec_gpu(spec)
    shapes = {role: spec_shape(spec, role) for role in spec.roles}
    traffic, _ = adapt_traffic(spec_traffic(spec), spec, model, shapes)
    return plan_capacity(spec, model, device, traffic, shapes)


def _target_ref(objs: list[Obj], role: str) -> Obj:
    for obj in objs:
        labels = obj["metadata"].get("labels", {})
        if obj["kind"] in SCALABLE and labels.get("app.kubernetes.io/component") == role:
            return {
                "apiVersion": obj["apiVersion"], "kind": obj["kind"],
                "name": obj["metadata"]["name"],
            }
    raise LookupError(f"no Deployment or LeaderWorkerSet for role {role}")  # a render bug


def _quantity(value: float) -> str:
    """A Kubernetes quantity: whole numbers as they are, fractions in milli-units."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def _behavior(t: RoleTarget) -> Obj:
    """Cooldowns as the HPA's stabilization windows (KEDA passes them to its HPA); up by at
    most max(4 pods, 100%) per 15 s (HPA's default, as the policy), down by one pod a period."""
    return {
        "scaleUp": {
            "stabilizationWindowSeconds": t.scale_up_s, "selectPolicy": "Max",
            "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 15},
                {"type": "Percent", "value": 100, "periodSeconds": 15},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": t.scale_down_s, "selectPolicy": "Min",
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": max(15, t.scale_down_s)}],
        },
    }


def _meta(plan: Plan, name: str, t: RoleTarget) -> Obj:
    meta = metadata(plan, name, t.role)
    meta["annotations"] = {HOW: f"{t.metric} {t.target:g} per instance: {t.how}"}
    return meta


def hpa(plan: Plan, t: RoleTarget, ref: Obj) -> Obj:
    metric = METRICS[t.metric][1]
    return {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": _meta(plan, f"{ref['name']}-hpa", t),
        "spec": {
            "scaleTargetRef": ref, "minReplicas": t.min_replicas, "maxReplicas": t.max_replicas,
            "metrics": [
                {
                    "type": "Pods",
                    "pods": {
                        "metric": {"name": metric},
                        "target": {"type": "AverageValue", "averageValue": _quantity(t.target)},
                    },
                }
            ],
            "behavior": _behavior(t),
        },
    }


def query(plan: Plan, t: RoleTarget, ref: Obj) -> str:
    """The role's total over its pods (KEDA divides by the replicas: AverageValue)."""
    sample = METRICS[t.metric][0]
    namespace = plan.spec.kubernetes.namespace
    match = f'{sample}{{namespace="{namespace}",pod=~"{ref["name"]}-.*"}}'
    if t.metric == "requestRate":
        return f"sum(rate({match}[1m]))"
    return f"sum({match})"


def scaled_object(plan: Plan, t: RoleTarget, ref: Obj) -> Obj:
    server = plan.spec.autoscaling.prometheus if plan.spec.autoscaling else None
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject",
        "metadata": _meta(plan, f"{ref['name']}-scaler", t),
        "spec": {
            "scaleTargetRef": ref, "minReplicaCount": t.min_replicas,
            "maxReplicaCount": t.max_replicas, "pollingInterval": 15,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(t)}},
            "triggers": [
                {
                    "type": "prometheus", "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": str(server), "query": query(plan, t, ref),
                        "threshold": f"{t.target:g}",
                    },
                }
            ],
        },
    }


def autoscale_objects(plan: Plan, objs: list[Obj]) -> list[Obj]:
    """One autoscaler per role under `autoscaling`; none without the section."""
    section = plan.spec.autoscaling
    if section is None:
        return []
    roles = targets(plan, capacity(plan))
    out = []
    for t in roles:
        ref = _target_ref(objs, t.role)
        out.append(scaled_object(plan, t, ref) if section.engine == "keda" else hpa(plan, t, ref))
    return out


def check_on_hosts(plan: Plan) -> None:
    """On SSH hosts `pdctl autoscale` runs the section: its roles, targets and budget are
    checked when the spec renders (SpecError, located), as for Kubernetes."""
    targets(plan, capacity(plan))
