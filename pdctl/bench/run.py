"""One `pdctl bench` run as its report document (docs/bench.md), and the quick P/D canary of
`up --verify`, `status --verify` and `top --canary`. The CLI reads the files and prints."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pdctl import __version__
from pdctl.bench import canary, load, report
from pdctl.bench.remote import Bench
from pdctl.bench.report import capacity
from pdctl.capacity import kv_pull
from pdctl.capacity.report_json import plan_dict
from pdctl.capacity.steptime import calibration_for
from pdctl.compat import ROUTER_VERSION
from pdctl.errors import UsageError

if TYPE_CHECKING:
    from pdctl.bench.canary import Verdict
    from pdctl.bench.load import Workload
    from pdctl.capacity.report import CapacityPlan
    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle
    from pdctl.targets.ssh import SshOptions

# (the plan's figures or None, their basis or why none, the plan `plan --load` simulates on)
Predictions = tuple[dict[str, Any] | None, str, "CapacityPlan | None"]
VERIFY_PROMPTS, VERIFY_TOKENS, VERIFY_TIMEOUT = 2, 8, 120.0
# the report's plan.basis for an `engine.device: cpu` spec: `pdctl plan`'s figures are a GPU's
# (memory, roofline), so a CPU deployment has none to be compared with (docs/bench.md)
NO_GPU_PLAN = "engine.device cpu: no GPU plan"


def no_gpu_plan() -> Predictions:
    """The predictions of a CPU engine: none, and why (no ratios, no `plan --load` per step)."""
    return None, NO_GPU_PLAN, None


def predictions(result: CapacityPlan, origin: str) -> Predictions:
    """`pdctl plan`'s figures (inputs.capacity_plan) as the report compares them."""
    doc = plan_dict(result)
    if not result.fits:
        return capacity(doc), f"{doc['gpu']['name']} ({origin})", None

    basis = calibration_for(result.gpu, result.roles[-1].shape.engine).basis
    return capacity(doc), f"{doc['gpu']['name']} ({origin}); speed {basis}", result


def run(plan: Plan, bundle: Bundle, ssh: Callable[[], SshOptions],
        predict: Callable[[Workload], Predictions], instance: str | None, timeout: float,
        with_canary: bool, canary_only: bool, token_ids: bool = False) -> dict[str, Any]:
    """Connect (`ssh`: the options, asked for then), run the canary and the steps; the report
    (`predict`: the plan's figures for the spec's workload)."""
    spec = plan.spec
    w = load.workload_of(spec)
    b = spec.bench
    pd = plan.disaggregated
    if canary_only and not pd:
        raise UsageError("--canary-only: the canary checks the P/D path (phases 2 and 3)")
    cap, plan_basis, planned = predict(w)
    session = Bench(plan, bundle, ssh(), instance).open()
    try:
        doc: dict[str, Any] = {
            "kind": report.KIND, "version": report.VERSION, "pdctl": __version__,
            "name": plan.name, "phase": plan.phase, "specHash": report.spec_hash(spec),
            "specHashOf": report.SPEC_HASH_OF,
            "createdAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "endpoint": session.base_url(session.driver()),
            "hosts": [{"name": h.name, "address": h.address} for h in plan.hosts_used()],
            "engines": session.engines(),
            "router": {"version": ROUTER_VERSION} if any(
                u.role == "router" for u in plan.units) else None,
            "workload": {"promptTokens": w.prompt_tokens, "outputTokens": w.output_tokens,
                         "rangeRatio": w.range_ratio, "seed": w.seed,
                         "ttftMs": w.ttft_ms, "tpotMs": w.tpot_ms},
            "plan": {"basis": plan_basis, "capacity": cap},
            "canary": None, "steps": [],
        }
        n_prompts = b.canary_prompts if b is not None else 4
        tokens = b.canary_tokens if b is not None else 16
        if pd and with_canary and n_prompts:
            verdict = session.canary(n_prompts, tokens, w.seed, min(timeout, 300), token_ids)
            doc["canary"] = canary.as_dict(verdict)
        if canary_only:
            return doc
        model = planned.model if planned is not None else kv_pull.known_model(spec)
        most = kv_pull.carried(spec, load.longest_prompt(w), model)
        for asked in load.steps(b.request_rate if b else (), b.concurrency if b else ()):
            step = load.capped(asked, load.requests_of(w, asked), most)
            row = session.step(w, step, timeout)
            if step != asked:
                row["capped"] = capped_note(asked, step, w)
            if planned is not None:  # `pdctl plan --load` of this very step's load
                from pdctl.capacity.atload import predict_step

                offered = step.rate if step.rate is not None and math.isfinite(step.rate) else None
                pred = predict_step(planned, load.requests_of(w, step), step.concurrency, offered)
                row["predicted"] = pred
                row["ratio"] = report.ratios(report.measured_for_ratio(row["measured"]), pred)
            doc["steps"].append(row)
        return doc
    finally:
        session.close()


def capped_note(asked: load.Step, step: load.Step, w: Workload) -> dict[str, Any]:
    """Why a step was sent with fewer requests in flight than it asked (report and CLI)."""
    return {
        "asked": asked.label, "concurrency": step.concurrency,
        "why": f"Mooncake over TCP: at most {step.concurrency:,} requests of "
               f"{load.longest_prompt(w):,} prompt tokens in flight keep every KV pull to a "
               "decode within what the transport holds once the KV cache is fragmented; more "
               "are refused and wait on decode (docs/phase2-bare-metal.md)",
    }


def check_verify(plan: Plan, option: str = "--verify") -> None:
    """The quick canary is for P/D (phases 2, 3) units on hosts (plan.units; none on
    Kubernetes), which a bench session reaches: refused before anything starts."""
    if not plan.disaggregated or not plan.units:
        raise UsageError(
            f"{option} runs the P/D canary: phases 2 and 3 on SSH hosts "
            f"({plan.name} is phase {plan.phase} on {plan.target})",
            fix=f"leave out {option}",
        )


def quick_canary(plan: Plan, bundle: Bundle, ssh: SshOptions) -> Verdict:
    """A few greedy prompts through the router and through the first prefill engine alone,
    with the engines' logs and connector counters read around them."""
    seed = plan.spec.bench.seed if plan.spec.bench is not None else 0
    session = Bench(plan, bundle, ssh).open()
    try:
        return session.canary(VERIFY_PROMPTS, VERIFY_TOKENS, seed, VERIFY_TIMEOUT)
    finally:
        session.close()
