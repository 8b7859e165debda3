"""Speed at a load: TTFT, TPOT, ITL, E2E, throughput and goodput of a planned deployment under
`--load concurrency=N` or `--load rate=R` (pure). `pdctl plan --load` prints it and `pdctl
bench` puts it beside each step it measures.

Each instance runs pdctl.capacity.simulate with its own share of the load (replicas and DP ranks
split it evenly, as a round-robin router does) on the step model of pdctl.capacity.steptime.
P/D (phases 2, 3): the decode instances run the load with the KV arriving prefilled, which
gives the request rate the deployment sustains; the prefill instances run that rate as Poisson
arrivals of one-token requests, which gives TTFT (the KV transfer between them is not
modelled)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from pdctl.capacity.simulate import Load, Result, simulate
from pdctl.capacity.steptime import engine_for
from pdctl.errors import UsageError

LOAD_REQUESTS = 400  # requests a predicted load runs (steady state, not the ramp)
LOAD_MIN_ROUNDS = 4  # ... and at least this many rounds of the concurrency


@dataclass(frozen=True)
class LoadSpec:
    """What `--load` says: a closed loop of `concurrency` clients or Poisson `rate`."""

    concurrency: int | None = None
    rate: float | None = None

    @property
    def label(self) -> str:
        return f"concurrency={self.concurrency}" if self.concurrency else f"rate={self.rate:g}"


def parse_load(text: str) -> LoadSpec:
    """`concurrency=N` (N >= 1) or `rate=R` (requests/s > 0)."""
    m = re.fullmatch(r"\s*(concurrency|rate)\s*=\s*([0-9.eE+-]+)\s*", text)
    fix = "write --load concurrency=32 or --load rate=4.5"
    if not m:
        raise UsageError(f"--load: {text!r} is not concurrency=N or rate=R", fix=fix)
    try:
        value = float(m.group(2))
    except ValueError:
        raise UsageError(f"--load: {m.group(2)!r} is not a number", fix=fix) from None
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"--load: {m.group(1)} must be above 0 (got {m.group(2)})", fix=fix)
    if m.group(1) == "concurrency":
        if value != int(value):
            raise UsageError(f"--load: concurrency must be a whole number (got {m.group(2)})",
                             fix=fix)
        return LoadSpec(concurrency=int(value))
    return LoadSpec(rate=value)


def _instances(role: Any) -> int:
    return max(1, role.replicas) * max(1, role.shape.dp)


def _run(plan: Any, role: Any, load: Load, prefilled: bool = False) -> Result:
    per_gpu = role.slice.per_gpu if role.slice is not None else 1
    engine = engine_for(plan.model, plan.gpu, role.shape, per_gpu)
    tokens, seqs = role.shape.batching(role.memory.total, role.memory.max_model_len)
    kv = role.memory.kv_token_slots or role.memory.kv_tokens or None  # tokens stored at once
    return simulate(engine, load, tokens, seqs, kv, prefilled=prefilled)


def predict(plan: Any, spec: LoadSpec, slo_ttft_ms: float | None = None,
            slo_tpot_ms: float | None = None) -> dict[str, Any]:
    """The figures of `plan` (a CapacityPlan) under `spec`, for the whole deployment."""
    t = plan.traffic
    prompt, output = t.prompt_tokens, t.output_tokens
    if not plan.disaggregated:
        role = plan.roles[0]
        n = _instances(role)
        res = _run(plan, role, _load(spec, n, prompt, output))
        fig = res.summary()
        scale = n
        pairs = list(zip(res.ttft_s, res.tpot_s or [0.0] * len(res.ttft_s), strict=False))
        shares = (1.0, 1.0)
    else:
        pre, dec = plan.role("prefill"), plan.role("decode")
        nd, np_ = _instances(dec), _instances(pre)
        dres = _run(plan, dec, _load(spec, nd, prompt, output), prefilled=True)
        dfig = dres.summary()
        rate = (dfig["requestThroughput"] or 0.0) * nd  # the deployment's request rate
        if spec.rate:
            rate = min(rate, spec.rate)
        pres = _run(plan, pre, Load(prompt, 1, LOAD_REQUESTS, rate=max(rate / np_, 1e-6)))
        pfig = pres.summary()
        fig = dict(dfig)
        fig["ttftMs"] = pfig["ttftMs"]
        e2e = {k: (None if v is None or fig["ttftMs"][k] is None else  # type: ignore[index]
                   v + fig["ttftMs"][k])  # type: ignore[index]
               for k, v in dfig["e2elMs"].items()}  # type: ignore[union-attr]
        fig["e2elMs"] = e2e
        scale = nd
        pairs = []  # the two sides are simulated apart: each request's pair is not known
        shares = (_share(pres.ttft_s, slo_ttft_ms), _share(dres.tpot_s, slo_tpot_ms))
    out: dict[str, Any] = {
        "load": spec.label,
        "ttftMs": fig["ttftMs"],
        "tpotMs": fig["tpotMs"],
        "itlMs": fig["itlMs"],
        "e2elMs": fig["e2elMs"],
        "requestThroughput": _scaled(fig["requestThroughput"], scale),
        "outputThroughput": _scaled(fig["outputThroughput"], scale),
        "totalTokenThroughput": _scaled(fig["totalTokenThroughput"], scale),
        "goodput": None,
        "basis": engine_for(plan.model, plan.gpu, plan.roles[-1].shape).cal.basis,
    }
    if (slo_ttft_ms or slo_tpot_ms) and out["requestThroughput"]:
        if pairs:
            share = sum(
                1 for ttft, tpot in pairs
                if (slo_ttft_ms is None or ttft * 1000 <= slo_ttft_ms)
                and (slo_tpot_ms is None or tpot * 1000 <= slo_tpot_ms)
            ) / len(pairs)
        else:  # P/D: the sides meet their SLOs independently
            share = shares[0] * shares[1]
        out["goodput"] = {
            "requestsPerSecond": float(f"{out['requestThroughput'] * share:.4g}"),
            "shareMeetingSlo": round(share, 4),
        }
    return out


def _share(xs: list[float], slo_ms: float | None) -> float:
    if slo_ms is None or not xs:
        return 1.0
    return sum(1 for x in xs if x * 1000 <= slo_ms) / len(xs)


def _load(
    spec: LoadSpec, instances: int, prompt: int, output: int, requests: int | None = None
) -> Load:
    """One instance's share of the load; `requests`: the whole load's count (bench's step),
    else enough for a steady middle (a closed loop: enough rounds of its concurrency)."""
    mine = max(1, math.ceil(requests / instances)) if requests is not None else None
    if spec.concurrency is not None:
        c = max(1, math.ceil(spec.concurrency / instances))
        rounds = max(LOAD_REQUESTS // 4, LOAD_MIN_ROUNDS * c)
        return Load(prompt, output, mine or rounds, concurrency=c)
    return Load(prompt, output, mine or LOAD_REQUESTS, rate=(spec.rate or 0.0) / instances)


def _scaled(x: Any, n: int) -> float | None:
    return None if x is None else float(f"{x * n:.4g}")


def predict_step(plan: Any, requests: int, concurrency: int | None, rate: float | None) -> dict[
        str, float | None]:
    """What `pdctl bench` compares one step with: the p50 TTFT and TPOT and the throughput of
    the step's own load (its request count, its concurrency or rate; all at once when it has
    neither), in the names of pdctl.bench.report."""
    if concurrency is None and rate is None:
        concurrency = requests
    spec = LoadSpec(concurrency=concurrency, rate=None if concurrency else rate)
    t = plan.traffic
    if not plan.disaggregated:
        role = plan.roles[0]
        n = _instances(role)
        load = _load(spec, n, t.prompt_tokens, t.output_tokens, requests)
        fig = _run(plan, role, load).summary()
        scale = n
    else:
        fig, scale = predict(plan, spec), 1
    return {
        "ttftMs": fig["ttftMs"]["p50"],  # type: ignore[index]
        "tpotMs": fig["tpotMs"]["p50"],  # type: ignore[index]
        "requestThroughput": _scaled(fig["requestThroughput"], scale),
        "outputThroughput": _scaled(fig["outputThroughput"], scale),
        "totalTokenThroughput": _scaled(fig["totalTokenThroughput"], scale),
    }
