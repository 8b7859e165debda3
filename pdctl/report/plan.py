"""The HTML report of a capacity plan (`pdctl plan --report`): memory per GPU of each role,
the KV cache it leaves, the packing advice. Input: the dict `pdctl plan -o json` prints
(pdctl.capacity.report_json.plan_dict)."""

from __future__ import annotations

from typing import Any

from pdctl.report import page as p
from pdctl.report.svg import figure, to_svg

PARTS = (  # (role dict key, label, colour)
    ("weightsGib", "weights", "tab:blue"),
    ("kvAvailableGib", "KV cache", "tab:green"),
    ("activationGib", "activations", "tab:orange"),
    ("cudaGraphsGib", "CUDA graphs", "tab:purple"),
    ("nonTorchGib", "non-torch", "tab:brown"),
    ("otherProcessesGib", "other processes", "tab:gray"),
)


def _label(r: dict[str, Any]) -> str:
    par = f"TP{r.get('tensorParallel', 1)}"
    if (r.get("pipelineParallel") or 1) > 1:
        par += f" PP{r['pipelineParallel']} stage {r.get('pipelineStage', 0)}"
    return f"{r.get('role')} x{r.get('replicas', 1)} ({par})"


def memory_chart(plan: dict[str, Any]) -> str:
    """One horizontal bar per role: a GPU's memory as weights, KV, activations, graphs,
    non-torch, other processes and what is left free, against the GPU's total."""
    roles = plan.get("roles") or []
    fig = figure(width=11, height=0.9 + 0.6 * max(1, len(roles)))
    ax = fig.axes[0]
    labels = [_label(r) for r in roles]
    left = [0.0] * len(roles)
    for key, label, color in PARTS:
        vals = [float(r.get(key) or 0.0) for r in roles]
        if any(vals):
            ax.barh(range(len(roles)), vals, left=left, color=color, label=label)
            left = [a + b for a, b in zip(left, vals, strict=True)]
    free = [max(0.0, float(r.get("totalGib") or 0.0) - used) for r, used in zip(roles, left,
                                                                               strict=True)]
    ax.barh(range(len(roles)), free, left=left, color="white", edgecolor="tab:gray",
            hatch="//", label="free (outside --gpu-memory-utilization)")
    for i, r in enumerate(roles):
        if not r.get("fits", True):
            ax.annotate("does not fit", (left[i], i), xytext=(4, 0), textcoords="offset points",
                        color="tab:red", va="center")
    ax.set_yticks(range(len(roles)), labels)
    ax.invert_yaxis()
    ax.set_xlabel("GiB per GPU")
    fig.legend(fontsize=7, ncols=7, loc="outside lower center", frameon=False)
    return to_svg(fig)


def plan_html(plan: dict[str, Any]) -> str:
    model, gpu, t = plan.get("model") or {}, plan.get("gpu") or {}, plan.get("traffic") or {}
    title = f"pdctl plan: {model.get('name')} on {gpu.get('name')}"
    about = p.table(("", ""), [
        ("model", f"{model.get('name')}, {p.num(model.get('paramsBillion'))} B params "
                  f"({model.get('source')})"),
        ("GPU", f"{gpu.get('name')}, {p.num(gpu.get('memoryMib'))} MiB"
                + (f" ({gpu['from']})" if gpu.get("from") else "")),
        ("phase", plan.get("phase")),
        ("traffic", f"{t.get('promptTokens')} prompt / {t.get('outputTokens')} output tokens, "
                    f"TTFT {p.num(t.get('ttftMs'))} ms, TPOT {p.num(t.get('tpotMs'))} ms"),
        ("fits", "yes" if plan.get("fits") else "NO"),
    ])
    rows = []
    for r in plan.get("roles") or []:
        dec = r.get("decode") or {}
        rows.append((_label(r), r.get("totalGib"), r.get("gpuMemoryUtilization"),
                     r.get("weightsGib"), r.get("kvAvailableGib"), r.get("kvTokens"),
                     r.get("concurrencyAtMaxModelLen"), dec.get("batch"),
                     dec.get("stepMsExpected"), dec.get("tokensPerSecond"),
                     r.get("prefillTokensPerSecond")))
    roles = p.table(("role", "GPU GiB", "util", "weights GiB", "KV GiB", "KV tokens",
                     "seqs at max len", "decode batch", "step ms", "decode tok/s",
                     "prefill tok/s"), rows)
    advice = plan.get("advice") or {}
    parts = [
        p.section("Plan", about),
        p.section("Memory per GPU", p.chart(memory_chart(plan),
                                            "per role, one GPU: what vLLM allocates within "
                                            "--gpu-memory-utilization, and the rest"), roles),
        p.section(f"Packing advice ({advice.get('case')}, "
                  f"{'pack' if advice.get('pack') else 'do not pack'})",
                  *(p.para(line) for line in advice.get("lines") or [])),
    ]
    if plan.get("warnings"):
        parts.append(p.section("Warnings", *(p.para(w, "bad") for w in plan["warnings"])))
    return p.page(title, *parts)
