"""A bench report: measured figures beside what `pdctl plan` predicted, and the comparison of
two reports (pure).

The predictions are those of `pdctl plan --output json` (pdctl.capacity.report_json) for the
bench's workload: TTFT from the prefill role's tokens/s over one prompt (no queue), TPOT from
the decode step (batch 1 where at most one request ran at a time, else at the planned batch),
output throughput from the decode instances' tokens/s (capped by what the step offered)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from pdctl.capacity.simulate import sig
from pdctl.errors import UsageError
from pdctl.plan.args import flag_values

KIND = "pdctl-bench"
VERSION = 1


def capacity(plan_json: dict[str, Any]) -> dict[str, float | None]:
    """The plan's figures the report compares with (None where the plan has none): TTFT of one
    prompt, the decode step at batch 1 and at the plan's batch, that batch, the decode engines
    and their output tokens/s at that batch."""
    pd = plan_json.get("pd") or {}
    roles = plan_json.get("roles") or []
    prompt = (plan_json.get("traffic") or {}).get("promptTokens")
    out_tps = 0.0
    step_ms = ttft = batch = None
    engines = 0
    for r in roles:
        dec = r.get("decode")
        if r.get("role") in ("serve", "decode") and dec:
            out_tps += dec["tokensPerSecond"] * r.get("replicas", 1)
            step_ms = dec["stepMsExpected"]
            batch = dec.get("batch")
            engines += r.get("replicas", 1)
        if r.get("role") in ("serve", "prefill") and r.get("prefillTokensPerSecond") and prompt:
            ttft = sig(prompt / r["prefillTokensPerSecond"] * 1000)  # one prompt, no queue
    return {
        "ttftMs": ttft, "tpotMsBatch1": pd.get("batch1TpotMs") if pd else None,
        "tpotMsBatch": step_ms, "decodeBatch": batch, "decodeEngines": engines or None,
        "outputThroughput": round(out_tps, 1) if out_tps else None,
    }


def tpot_at(cap: dict[str, float | None], batch: float) -> float | None:
    """The plan's decode step (ms) at `batch` sequences per engine. The roofline step is the
    weights plus the batch's KV read over the bandwidth, so it is linear in the batch between
    batch 1 and the plan's batch (capped there: the engine runs no more at once)."""
    one, full, top = cap["tpotMsBatch1"], cap["tpotMsBatch"], cap.get("decodeBatch")
    if one is None or full is None or not top or top <= 1:
        return full if batch > 1 or one is None else one
    b = min(max(batch, 1.0), float(top))
    return one + (full - one) * (b - 1) / (top - 1)


def predicted(
    cap: dict[str, float | None], m: dict[str, Any], output_tokens: int, prompt_tokens: int,
    offered_rate: float | None, concurrency: int | None = None,
) -> dict[str, float | None]:
    """What the plan predicts for one step, given what the step offered: with a concurrency
    cap, the decode step at that many sequences spread over the decode engines and the
    closed-loop rate it allows (each request holds its place for one TTFT plus its output
    tokens' steps); else the plan's batch and rate, capped by the offered rate."""
    if concurrency is None and (m.get("maxConcurrentRequests") or 0) == 1:
        concurrency = 1  # one at a time however the step was asked
    engines = cap.get("decodeEngines") or 1
    tpot = cap["tpotMsBatch"] if concurrency is None else tpot_at(cap, concurrency / engines)
    out = cap["outputThroughput"]
    req = out / output_tokens if out else None
    if concurrency is not None and tpot:
        held_ms = (cap["ttftMs"] or 0.0) + output_tokens * tpot
        closed = concurrency / held_ms * 1000
        req = closed if req is None else min(req, closed)
    if req is not None and offered_rate is not None:
        req = min(req, offered_rate)
    out = None if req is None else req * output_tokens
    total = None if req is None else req * (prompt_tokens + output_tokens)
    return {"ttftMs": cap["ttftMs"]} | {k: None if v is None else sig(v) for k, v in (
        ("tpotMs", tpot), ("requestThroughput", req), ("outputThroughput", out),
        ("totalTokenThroughput", total))}


def measured_for_ratio(m: dict[str, Any]) -> dict[str, float | None]:
    return {
        "ttftMs": (m.get("ttftMs") or {}).get("p50"), "tpotMs": (m.get("tpotMs") or {}).get("p50"),
        "requestThroughput": m.get("requestThroughput"),
        "outputThroughput": m.get("outputThroughput"),
        "totalTokenThroughput": m.get("totalTokenThroughput"),
    }


def ratios(meas: dict[str, float | None], pred: dict[str, float | None]) -> dict[str, float | None]:
    """measured / predicted per figure (None where either is missing or the plan says 0)."""
    out: dict[str, float | None] = {}
    for k, want in pred.items():
        got = meas.get(k)
        out[k] = sig(got / want) if got is not None and want else None
    return out


def engine_flags(args: tuple[str, ...] | list[str]) -> dict[str, str]:
    """An engine's command-line flags as name -> value ("" for a switch), model and port
    left out: what two runs must share to be compared."""
    return {k: v for k, v in flag_values(args).items() if k not in ("--port", "--host")}


def flag_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The engine flags that differ between two reports, per role ("decode: --enforce-eager
    only in A")."""

    def by_role(doc: dict[str, Any]) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for e in doc.get("engines", []):
            out.setdefault(e["role"], e.get("flags", {}))
        return out

    ra, rb = by_role(a), by_role(b)
    lines = []
    for role in sorted(set(ra) | set(rb)):
        fa, fb = ra.get(role), rb.get(role)
        if fa is None or fb is None:
            lines.append(f"{role}: only in {'A' if fb is None else 'B'}")
            continue
        for flag in sorted(set(fa) | set(fb)):
            if flag not in fb:
                lines.append(f"{role}: {flag} only in A")
            elif flag not in fa:
                lines.append(f"{role}: {flag} only in B")
            elif fa[flag] != fb[flag]:
                lines.append(f"{role}: {flag} {fa[flag]} in A, {fb[flag]} in B")
    va, vb = ({e.get("version") or "?" for e in doc.get("engines", [])} for doc in (a, b))
    if va != vb:
        lines.append(f"engine version {','.join(sorted(va))} in A, {','.join(sorted(vb))} in B")
    return lines


FIGURES = (
    ("ttftMs", "p50", "TTFT p50 ms"), ("ttftMs", "p99", "TTFT p99 ms"),
    ("tpotMs", "p50", "TPOT p50 ms"), ("itlMs", "p50", "ITL p50 ms"),
    ("requestThroughput", None, "requests/s"), ("outputThroughput", None, "output tok/s"),
    ("requestGoodput", None, "goodput req/s"),
)


# What `specHash` digests, written beside it (`specHashOf`) from this version on. Reports
# without it carry the older digest of the whole model, defaults included, which changes
# whenever pdctl adds a field with a default (an unchanged YAML then reads as another spec).
SPEC_HASH_OF = "fields-set"


def _digest(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def spec_hash(spec: Any) -> str:
    """A digest of the merged spec (overlays applied) as the user wrote it: only the fields
    set (exclude_unset), so a field pdctl adds later, with its default, leaves it unchanged."""
    return _digest(spec.model_dump(mode="json", by_alias=True, exclude_unset=True))


def legacy_spec_hash(spec: Any) -> str:
    """The digest reports before `specHashOf` carry: the whole model, defaults included (equal
    only while pdctl's spec fields are those of the version that wrote the report)."""
    return _digest(spec.model_dump(mode="json", by_alias=True))


def spec_match(report: dict[str, Any], spec: Any) -> tuple[bool, str]:
    """Whether `report` was measured on `spec`, and '' or the note saying why not (or why it
    cannot tell). A report before `specHashOf` matches when its digest of the whole model can
    be recomputed; otherwise it predates the digest and nothing is known."""
    got = report.get("specHash")
    if report.get("specHashOf") == SPEC_HASH_OF:
        if got == spec_hash(spec):
            return True, ""
        return False, f"the report was measured on another spec (hash {got})"
    if got == legacy_spec_hash(spec):
        return True, ""
    return False, (
        f"the report (hash {got}) predates pdctl's spec hash of the fields set, and its "
        "digest of the whole spec changes with each pdctl that adds a field: whether it was "
        "measured on SPEC cannot be told"
    )


def problems(report: dict[str, Any]) -> list[str]:
    """Why a run fails (exit 1): failed requests, suspect KV transfers, a failed canary."""
    out = []
    for s in report["steps"]:
        failed = s["measured"].get("failed") or 0
        if failed:
            out.append(f"{s['load']}: {failed} of {failed + (s['measured']['completed'] or 0)} "
                       "requests failed")
        suspect = s.get("failures") or []
        if suspect:  # answered 200 maybe, but from KV that may be wrong: never a success
            out.append(f"{s['load']}: suspect KV transfers: " + "; ".join(suspect[:2]))
    c = report.get("canary")
    if c is not None and not c["ok"]:
        out.append(c.get("verdict") or "P/D canary failed: " + "; ".join(c["failures"][:3]))
    return out


def check_report(doc: Any, name: str) -> dict[str, Any]:
    if not isinstance(doc, dict) or doc.get("kind") != KIND:
        raise UsageError(
            f'{name}: not a pdctl bench report (no "kind": "{KIND}")',
            fix="pass files written by `pdctl bench -o json` or `--save`",
        )
    return doc


def compare(a: dict[str, Any], b: dict[str, Any], allow_flag_diff: bool) -> dict[str, Any]:
    """Step by step (matched by load), B's figures over A's. UsageError when the engines'
    flags or versions differ and `allow_flag_diff` is off (naming what differs)."""
    diffs = flag_differences(a, b)
    if diffs and not allow_flag_diff:
        raise UsageError(
            "the runs' engines differ: " + "; ".join(diffs),
            fix="compare runs of the same engine flags, or pass --allow-flag-diff",
        )
    steps_b = {s["load"]: s for s in b.get("steps", [])}
    rows = []
    for sa in a.get("steps", []):
        sb = steps_b.get(sa["load"])
        if sb is None:
            continue
        for key, pct, label in FIGURES:
            va = sa["measured"].get(key)
            vb = sb["measured"].get(key)
            if pct is not None:
                va = (va or {}).get(pct)
                vb = (vb or {}).get(pct)
            rows.append({"load": sa["load"], "figure": label, "a": va, "b": vb,
                         "bOverA": sig(vb / va) if va and vb is not None else None})
    return {
        "a": {"specHash": a.get("specHash"), "createdAt": a.get("createdAt")},
        "b": {"specHash": b.get("specHash"), "createdAt": b.get("createdAt")},
        "flagDifferences": diffs, "rows": rows,
    }
