"""Per-role autoscaling targets, derived from the capacity plan at the workload's SLOs.

For each role written under `autoscaling`, three per-instance figures, each with a one-line
"how derived" string (rendered as an annotation on the HPA / ScaledObject and printed by
`pdctl explain` for the fields that set them; docs/autoscaling.md):

- requestRate: the requests/s one instance carries. Prefill: 0.8 / prefill seconds a
  request (80% busy, as `pdctl plan` counts prefill instances); decode: 0.8 / decode seconds a
  request at the planned batch, 80% busy too; serve: 0.8 / (prefill + decode seconds).
- waiting: half the requests one instance may queue while a new one still meets
  workload.ttftMs (1 s without it): 0.5 x (TTFT budget - one prefill) / seconds one queued
  request holds the queue (the other half absorbs the growth while an instance starts).
- kvUsage: the KV-cache share the planned batch fills (batch x mean context / KV tokens),
  kept within [0.1, 0.9].

`capacity` is a pdctl.capacity.report.CapacityPlan (the layer above; read by duck typing);
None when the model's shape is unknown to the render (`model.config` files), then every
role needs its `target`. Pure."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pdctl.errors import SpecError
from pdctl.plan.model import Plan

NO_TTFT_S = 1.0  # the queueing budget without workload.ttftMs
# Scale up at half the queue the TTFT budget tolerates: the other half absorbs the queue's
# growth while a new instance starts (the replay, docs/autoscaling.md).
QUEUE_SHARE = 0.5
KV_FLOOR, KV_CEILING = 0.1, 0.9
# Rate targets keep instances 80% busy (as plan counts prefill instances, capacity/report.py):
# a saturated role then reads 1.25x its target (vllm:request_success counts served requests).
BUSY = 0.8


@dataclass(frozen=True)
class Figure:
    metric: str  # waiting | kvUsage | requestRate
    value: float
    how: str


@dataclass(frozen=True)
class RoleTarget:
    """One role's scaling: bounds, cooldowns, its metric's target and every derived figure."""

    role: str
    metric: str
    target: float
    how: str
    min_replicas: int
    max_replicas: int
    scale_up_s: int
    scale_down_s: int
    gpus_per_instance: int
    figures: tuple[Figure, ...] = ()

    def figure(self, metric: str) -> Figure | None:
        return next((f for f in self.figures if f.metric == metric), None)


def gpus_per_instance(plan: Plan, role: str) -> int:
    """GPUs one instance of the role holds: every node of a multi-node group."""
    for inst in plan.instances:
        if inst.role == role:
            return max(1, inst.gpu_count) * (1 + sum(w.replicas for w in inst.workers))
    return 1


def _figures(role: str, capacity: Any) -> tuple[Figure, ...]:
    pd, traffic = capacity.pd, capacity.traffic
    pre_s, dec_s = pd.prefill_s_per_request, pd.decode_s_per_request
    prefill = capacity.role("prefill") or capacity.role("serve")
    one_prefill = pre_s * prefill.shape.dp  # one request's prefill runs on one DP rank
    ttft_s = traffic.ttft_ms / 1000 if traffic.ttft_ms else NO_TTFT_S
    budget = f"workload.ttftMs {traffic.ttft_ms:g} ms" if traffic.ttft_ms else f"{NO_TTFT_S:g} s"
    if role == "prefill":
        rate, rate_how = (
            BUSY / pre_s,
            (
                f"{BUSY:g} / {pre_s * 1000:.1f} ms of prefill a request "
                f"({traffic.prompt_tokens} prompt tokens): 80% busy, as plan counts prefill"
            ),
        )
        hold = pre_s
    elif role == "decode":
        rate, rate_how = (
            BUSY / dec_s,
            (
                f"{BUSY:g} / {dec_s * 1000:.1f} ms of decode a request ({traffic.output_tokens} "
                f"output tokens at batch {capacity.role('decode').batch}): 80% busy"
            ),
        )
        hold = dec_s
    else:
        rate, rate_how = (
            BUSY / (pre_s + dec_s),
            (
                f"{BUSY:g} / ({pre_s * 1000:.1f} ms prefill + {dec_s * 1000:.1f} ms "
                "decode a request)"
            ),
        )
        hold = pre_s + dec_s
    waiting = max(1, math.floor(QUEUE_SHARE * (ttft_s - one_prefill) / hold))
    waiting_how = (
        f"{QUEUE_SHARE:g} x ({budget} - {one_prefill * 1000:.1f} ms one prefill) / "
        f"{hold * 1000:.1f} ms each queued request holds the queue, at least 1"
    )
    own = capacity.role(role) or capacity.role("serve")
    tokens = own.memory.kv_tokens
    used = own.batch * traffic.mean_context / tokens if tokens > 0 else KV_CEILING
    kv = round(min(KV_CEILING, max(KV_FLOOR, used)), 2)
    kv_how = (
        f"batch {own.batch} x {traffic.mean_context} mean context tokens / {tokens:,} KV tokens"
        f" = {used:.2f}, kept within [{KV_FLOOR:g}, {KV_CEILING:g}]"
    )
    return (
        Figure("waiting", float(waiting), waiting_how), Figure("kvUsage", kv, kv_how),
        Figure("requestRate", round(rate, 3), rate_how),
    )


def targets(plan: Plan, capacity: Any | None) -> tuple[RoleTarget, ...]:
    """The roles' targets; SpecError (located) for a role the phase lacks, a role with no
    target and no capacity plan, or maxReplicas beyond autoscaling.maxGpus."""
    section = plan.spec.autoscaling
    if section is None:
        return ()
    roles = plan.spec.roles
    out = []
    for role, scaling in section.roles():
        if role not in roles:
            raise SpecError(
                f"phase {plan.phase} has no {role} role (it runs {', '.join(roles)})",
                path=f"autoscaling.{role}", fix=f"scale {' or '.join(roles)} instead",
            )
        figures = _figures(role, capacity) if capacity is not None else ()
        derived = next((f for f in figures if f.metric == scaling.metric), None)
        if scaling.target is not None:
            value, how = scaling.target, f"autoscaling.{role}.target, as written"
        elif derived is not None:
            value, how = derived.value, derived.how
        else:
            raise SpecError(
                f"no capacity figures for {plan.spec.model.name} to derive the {role} target",
                path=f"autoscaling.{role}.target",
                fix=f"write the per-instance target for {scaling.metric}, or set "
                "model.paramsBillion / a model pdctl knows",
            )
        out.append(
            RoleTarget(
                role, scaling.metric, value, how, scaling.min_replicas, scaling.max_replicas,
                scaling.scale_up_s, scaling.scale_down_s, gpus_per_instance(plan, role), figures,
            )
        )
    _check_budget(section.max_gpus, out)
    return tuple(out)


def _check_budget(max_gpus: int | None, roles: list[RoleTarget]) -> None:
    """Each role's HPA scales alone: the budget holds only if every role at its maxReplicas
    fits it (the host policy checks the sum at each decision instead)."""
    if max_gpus is None:
        return
    low = sum(r.min_replicas * r.gpus_per_instance for r in roles)
    high = sum(r.max_replicas * r.gpus_per_instance for r in roles)
    parts = " + ".join(f"{r.role} {r.max_replicas} x {r.gpus_per_instance}" for r in roles)
    if low > max_gpus:
        raise SpecError(
            f"the roles' minReplicas need {low} GPUs, above maxGpus {max_gpus}",
            path="autoscaling.maxGpus", fix=f"raise maxGpus to {low} or more, or lower minReplicas",
        )
    if high > max_gpus:
        raise SpecError(
            f"the roles' maxReplicas need {high} GPUs ({parts}), above maxGpus {max_gpus}",
            path="autoscaling.maxGpus",
            fix=f"raise maxGpus to {high}, or lower maxReplicas so that they fit",
        )

