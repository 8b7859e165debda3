"""The autoscaling policy as a pure function: observed per-role metrics, the current replicas
and the last action times -> the desired replicas of every role, each with its reason.

Per role: the desired count is what brings the observed metric per instance to the target
(HPA's rule: ceil(current x observed / target)), within a hysteresis band (no change while
the ratio observed/target lies in [1 - band, 1 + band]), up by at most max(4, current) and
down by one per decision, a scale-down only when the instances left would be at most 80%
busy, and up by one when they are over 90% busy (where `busy` is observed: the role's
token rates against the plan's tokens/s, the evidence a queue-length metric lacks when the
queue is empty, and ahead of it when load ramps up), after the
role's cooldown since its last action (scaleUpS before scaling up, scaleDownS before scaling
down), within [minReplicas, maxReplicas], and never past the GPU budget (a scale-up gets the
instances that fit, or waits; the reason says so). The same function serves the replay test bed
(replay.py) and `pdctl autoscale` on hosts (live.py, docs/autoscaling.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BAND = 0.1  # hysteresis: +-10% around the target holds still
BUSY_AFTER = 0.8  # a scale-down leaves the other instances at most 80% busy
BUSY_UP = 0.9  # instances this busy scale up even before their queue shows it


@dataclass(frozen=True)
class RoleRule:
    """One role's rule: the plan's target per instance and the spec's bounds."""

    role: str
    metric: str  # waiting | kvUsage | requestRate
    target: float
    min_replicas: int
    max_replicas: int
    gpus_per_instance: int
    scale_up_s: float = 30.0
    scale_down_s: float = 300.0


@dataclass(frozen=True)
class Decision:
    role: str
    replicas: int  # desired
    current: int
    reason: str

    @property
    def changed(self) -> bool:
        return self.replicas != self.current


def _wanted(
    rule: RoleRule, current: int, observed: float, band: float, busy: float | None
) -> tuple[int, str]:
    """Replicas the metric asks for (before cooldowns and the budget), and why."""
    per_instance = observed / max(1, current)
    ratio = per_instance / rule.target
    what = f"{rule.metric} {per_instance:.3g}/instance vs target {rule.target:g}"
    if current < rule.min_replicas:
        return rule.min_replicas, f"below minReplicas {rule.min_replicas}"
    if current > rule.max_replicas:
        return rule.max_replicas, f"above maxReplicas {rule.max_replicas}"
    hot = busy is not None and busy / max(1, current) > BUSY_UP and current < rule.max_replicas
    if hot and ratio <= 1 + band:
        assert busy is not None
        return current + 1, f"{what}, but {busy / current:.0%} busy: scale up ahead of the queue"
    if abs(ratio - 1) <= band:
        return current, f"{what}: within the +-{band:.0%} band"
    want = math.ceil(current * ratio - 1e-9)
    want = min(rule.max_replicas, max(rule.min_replicas, want))
    if want > current:
        want = min(want, current + max(4, current))  # HPA's default scale-up limit
        return want, f"{what}: over by {ratio - 1:.0%}, scale up"
    if want < current:
        if busy is not None and busy / (current - 1) > BUSY_AFTER:
            left = busy / (current - 1)
            return current, f"{what}: held, the other instances would be {left:.0%} busy"
        return current - 1, f"{what}: under by {1 - ratio:.0%}, scale down"
    bound = "maxReplicas" if ratio > 1 else "minReplicas"
    return current, f"{what}: held at {bound} {current}"


def decide(
    rules: Sequence[RoleRule], observed: Mapping[str, float], replicas: Mapping[str, int],
    last_action: Mapping[str, float], now: float, max_gpus: int | None = None, band: float = BAND,
    busy: Mapping[str, float] | None = None,
) -> tuple[Decision, ...]:
    """`observed`: each role's metric summed over its instances (waiting requests, KV usage
    fractions, requests/s); `last_action`: when each role last scaled (absent: never);
    `busy`: each role's busy instances (the sum of their busy fractions), where known.
    Scale-downs are decided first, so that GPUs they free count for scale-ups; scale-ups go
    in the rules' order while the budget has room."""
    steps: dict[str, tuple[int, str]] = {}
    for rule in rules:
        current = replicas[rule.role]
        load = busy.get(rule.role) if busy is not None else None
        want, why = _wanted(rule, current, observed.get(rule.role, 0.0), band, load)
        since = now - last_action[rule.role] if rule.role in last_action else math.inf
        cooldown = rule.scale_up_s if want > current else rule.scale_down_s
        bounded = current < rule.min_replicas or current > rule.max_replicas
        if want != current and since < cooldown and not bounded:
            kind = "scaleUpS" if want > current else "scaleDownS"
            why += f"; waits: {since:.0f} s since the last action < {kind} {cooldown:g}"
            want = current
        steps[rule.role] = (want, why)
    gpus = {r.role: r.gpus_per_instance for r in rules}
    used = sum(min(steps[r][0], replicas[r]) * gpus[r] for r in steps)  # after scale-downs
    out = []
    for rule in rules:
        current = replicas[rule.role]
        want, why = steps[rule.role]
        if want > current:
            extra = (want - current) * rule.gpus_per_instance
            if max_gpus is not None and used + extra > max_gpus:
                fits = (max_gpus - used) // rule.gpus_per_instance
                why += f"; GPU budget {max_gpus} (in use {used}, +{extra} wanted): "
                why += f"{fits} more fit" if fits > 0 else "waits"
                want = current + max(0, fits)
            used += (want - current) * rule.gpus_per_instance
        out.append(Decision(rule.role, want, current, why))
    return tuple(out)
