"""A replay test bed for the autoscaling policy: a trace of (rate, prompt, output) steps runs
against instances modelled by the plan's per-instance capacity, with the policy deciding at
every step (or fixed replicas), and is scored on SLO goodput per GPU-hour and scale actions
per hour.

The model is a fluid queue per role (prefill then decode; or serve alone): an instance
serves dt / (seconds a request holds it) requests a step, where those seconds scale the
plan's prefill / decode seconds a request by the step's prompt / output length. A request
is good when its prefill queueing + one prefill meets the TTFT budget and its wait for a
decode slot does too. New instances count GPUs from the decision and serve after
`start_s` (engine start). The observed metrics are what vLLM exports: waiting requests
(the queue), served requests/s (vllm:request_success) and KV usage (sequences in flight x
one sequence's share of an instance's KV). Pure and deterministic."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from pdctl.autoscale.policy import RoleRule, decide


@dataclass(frozen=True)
class Step:
    rate: float  # requests/s arriving
    prompt: int  # mean prompt tokens
    output: int  # mean output tokens


@dataclass(frozen=True)
class RoleModel:
    """One role's instance, from the capacity plan."""

    role: str
    prefill_s_per_token: float  # instance seconds of prefill a prompt token (0: no prefill)
    decode_s_per_token: float  # instance seconds of decode an output token at the batch
    one_prefill_s_per_token: float  # one request's own prefill time a token (on one rank)
    kv_per_token: float  # share of one instance's KV cache one context token holds
    gpus: int

    def service_s(self, step: Step) -> float:
        return step.prompt * self.prefill_s_per_token + step.output * self.decode_s_per_token


@dataclass(frozen=True)
class Model:
    roles: tuple[RoleModel, ...]
    ttft_s: float
    start_s: float = 90.0  # a new instance serves this long after the decision (engine start)

    def role(self, name: str) -> RoleModel:
        return next(r for r in self.roles if r.role == name)


def from_capacity(capacity: Any, gpus: dict[str, int], start_s: float = 90.0) -> Model:
    """Instances as the capacity plan (pdctl.capacity.report.CapacityPlan) models them."""
    pd, traffic = capacity.pd, capacity.traffic
    pre_tok = pd.prefill_s_per_request / traffic.prompt_tokens
    dec_tok = pd.decode_s_per_request / traffic.output_tokens
    first = capacity.role("prefill") or capacity.role("serve")
    one_tok = pre_tok * first.shape.dp
    ttft_s = (traffic.ttft_ms or 1000.0) / 1000
    roles = []
    for name in gpus:
        own = capacity.role(name)
        kv = 1 / own.memory.kv_tokens if own.memory.kv_tokens > 0 else 0.0
        roles.append(
            RoleModel(
                name, pre_tok if name in ("prefill", "serve") else 0.0,
                dec_tok if name in ("decode", "serve") else 0.0, one_tok, kv, gpus[name],
            )
        )
    return Model(tuple(roles), ttft_s, start_s)


@dataclass
class Score:
    label: str
    requests: float = 0.0
    good: float = 0.0
    gpu_hours: float = 0.0
    actions: int = 0
    hours: float = 0.0
    peak_gpus: int = 0
    log: list[str] = field(default_factory=list)

    @property
    def violations(self) -> float:
        """Share of the requests that missed the SLO (or were never served)."""
        return 1 - self.good / self.requests if self.requests else 0.0

    @property
    def goodput_per_gpu_hour(self) -> float:
        return self.good / self.gpu_hours if self.gpu_hours else 0.0

    @property
    def actions_per_hour(self) -> float:
        return self.actions / self.hours if self.hours else 0.0

    def line(self) -> str:
        return (
            f"{self.label:<28} goodput/GPU-h {self.goodput_per_gpu_hour:10.0f}  "
            f"SLO violations {self.violations:6.2%}  GPU-h {self.gpu_hours:7.2f}  "
            f"peak GPUs {self.peak_gpus:3d}  actions/h {self.actions_per_hour:5.1f}"
        )


def replay(
    model: Model, trace: Sequence[Step], replicas: dict[str, int], rules: Sequence[RoleRule] = (),
    max_gpus: int | None = None, dt: float = 15.0, label: str = "",
) -> Score:
    """Run `trace` (one Step per `dt` seconds) from `replicas`; `rules` empty: fixed."""
    names = [r.role for r in model.roles]
    queue = dict.fromkeys(names, 0.0)
    ready = dict(replicas)  # serving instances
    pending: list[tuple[float, str]] = []  # (ready at, role) of starting instances
    wanted = dict(replicas)  # instances holding GPUs (serving + starting)
    last: dict[str, float] = {}
    score = Score(label or ("policy" if rules else "fixed " + _counts(replicas)))
    for i, step in enumerate(trace):
        now = i * dt
        for at, role in [p for p in pending if p[0] <= now]:
            pending.remove((at, role))
            ready[role] += 1
        inflow = step.rate * dt
        score.requests += inflow
        observed: dict[str, dict[str, float]] = {}
        ok = True
        for rm in model.roles:
            service = rm.service_s(step)
            per_s = ready[rm.role] / service if service > 0 else math.inf  # requests/s
            backlog = queue[rm.role]
            wait = backlog / per_s if per_s > 0 else math.inf
            budget = model.ttft_s - step.prompt * rm.one_prefill_s_per_token
            ok = ok and wait <= max(0.0, budget if rm.prefill_s_per_token else model.ttft_s)
            queue[rm.role] += inflow
            served = min(queue[rm.role], per_s * dt)
            queue[rm.role] -= served
            running = served / dt * service  # Little's law: sequences in flight
            observed[rm.role] = {
                "busy": served * service / dt,  # busy instances (the token rates say it)
                "waiting": queue[rm.role], "requestRate": served / dt,
                "kvUsage": min(
                    float(ready[rm.role]),
                    (running + queue[rm.role]) * (step.prompt + step.output) * rm.kv_per_token,
                ),
            }
            inflow = served
        if ok:
            score.good += inflow  # what the last role finished within the SLO
        gpus = sum(wanted[r.role] * r.gpus for r in model.roles)
        score.gpu_hours += gpus * dt / 3600
        score.peak_gpus = max(score.peak_gpus, gpus)
        if rules:
            metrics = {r.role: observed[r.role][r.metric] for r in rules}
            busy = {r.role: observed[r.role]["busy"] for r in rules}
            for d in decide(rules, metrics, wanted, last, now, max_gpus, busy=busy):
                if not d.changed:
                    continue
                score.actions += 1
                last[d.role] = now
                score.log.append(f"{now:7.0f}s {d.role} {d.current}->{d.replicas}: {d.reason}")
                if d.replicas > d.current:
                    pending += [(now + model.start_s, d.role)] * (d.replicas - d.current)
                else:  # drain the newest: a starting one first, else a serving one
                    starting = [p for p in pending if p[1] == d.role]
                    if starting:
                        pending.remove(max(starting))
                    else:
                        ready[d.role] -= 1
                wanted[d.role] = d.replicas
    score.hours = len(trace) * dt / 3600
    return score


def _counts(replicas: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in replicas.items())


def shifting_trace(
    model: Model, base_prompt: int, base_output: int, dt: float = 15.0
) -> list[Step]:
    """Two hours: prefill-heavy traffic with a burst (1-minute ramp), a 5-minute shift to
    decode-heavy traffic with a burst, a quiet spell, then mixed traffic. Rates are set from
    the modelled instances (in instances' worth of load), so the trace fits any plan."""
    pre = Step(0, base_prompt * 4, max(1, base_output // 4))
    dec = Step(0, max(1, base_prompt // 4), base_output * 4)
    mix = Step(0, base_prompt, base_output)

    def rate(shape: Step, role: str, instances: float) -> float:
        rm = model.role(role) if role in {r.role for r in model.roles} else model.roles[0]
        return instances / rm.service_s(shape)

    first, last = model.roles[0].role, model.roles[-1].role
    phases = [  # (minutes, shape, role the load is counted in, instances' worth, ramp minutes)
        (25, pre, first, 2.5, 0),
        (10, pre, first, 4.5, 1),  # burst
        (25, dec, last, 2.5, 5),  # the shift: prompts shrink, outputs grow over 5 minutes
        (10, dec, last, 4.0, 1),  # burst
        (20, mix, first, 0.4, 5),  # quiet
        (30, mix, first, 1.5, 5),
    ]
    out: list[Step] = []
    for minutes, shape, role, n, ramp in phases:
        goal = Step(rate(shape, role, n), shape.prompt, shape.output)
        steps = int(minutes * 60 / dt)
        ramp_steps = min(steps, int(ramp * 60 / dt))
        was = out[-1] if out else goal
        for i in range(steps):
            f = (i + 1) / ramp_steps if i < ramp_steps else 1.0
            out.append(
                Step(
                    was.rate + (goal.rate - was.rate) * f,
                    round(was.prompt + (goal.prompt - was.prompt) * f),
                    round(was.output + (goal.output - was.output) * f),
                )
            )
    return out


def best_fixed(
    model: Model, trace: Sequence[Step], bounds: dict[str, tuple[int, int]], max_gpus: int | None,
    budget: float,
) -> Score | None:
    """The fixed replicas (within `bounds` and the GPU budget) with the best goodput per
    GPU-hour whose SLO violations stay within `budget`: the fairest fixed baseline."""
    roles = list(bounds)
    best: Score | None = None
    gpus = {r.role: r.gpus for r in model.roles}
    for counts in itertools.product(*(range(lo, hi + 1) for lo, hi in bounds.values())):
        replicas = dict(zip(roles, counts, strict=True))
        if max_gpus is not None and sum(replicas[r] * gpus[r] for r in roles) > max_gpus:
            continue
        score = replay(model, trace, replicas, label="fixed " + _counts(replicas))
        if score.violations <= budget and (
            best is None or score.goodput_per_gpu_hour > best.goodput_per_gpu_hour
        ):
            best = score
    return best
