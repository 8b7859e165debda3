"""The HTML report of a `pdctl bench` run (`--report`), and of two runs drawn on the same
axes (`--compare A B --report`). Input: the report dict `pdctl bench -o json` prints."""

from __future__ import annotations

import re
from typing import Any

from pdctl.report import page as p
from pdctl.report.svg import figure, to_svg

PCTS = (("p50", "-"), ("p90", "--"), ("p99", ":"))
LATENCY = (  # (title, measured keys, prediction key, SLO key of the workload)
    ("TTFT (ms)", ("ttftMs",), "ttftMs", "ttftMs"),
    ("TPOT / ITL (ms)", ("tpotMs", "itlMs"), "tpotMs", "tpotMs"),
    ("E2E latency (ms)", ("e2elMs",), "e2elMs", None),
)
PLAN = dict(color="black", marker="x", linestyle=(0, (4, 2)), linewidth=1, label="plan p50")
RUN_COLORS = ("tab:blue", "tab:orange")


def _x_axis(loads: list[str]) -> tuple[list[float], str, bool]:
    """Where each step goes on the x axis: its concurrency or rate where every step is of one
    kind (log scale when they span a factor of 4), else its position with the load as label."""
    for kind, label in (("concurrency", "concurrency"), ("rate", "request rate (req/s)")):
        vals = []
        for load in loads:
            m = re.fullmatch(kind + r" ([0-9.e+]+)(/s)?", load)
            if m is None:
                break
            vals.append(float(m.group(1)))
        else:
            if vals and min(vals) > 0:
                return vals, label, max(vals) / min(vals) >= 4
    return [float(i) for i in range(len(loads))], "step", False


def _setup_x(ax: Any, xs: list[float], label: str, log: bool, loads: list[str]) -> None:
    if log:
        ax.set_xscale("log", base=2)
    if label == "step":
        ax.set_xticks(xs, loads, rotation=15)
    else:
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.minorticks_off()
    ax.set_xlabel(label)


def _pct(m: dict[str, Any], key: str, pct: str) -> float | None:
    v = m.get(key)
    return v.get(pct) if isinstance(v, dict) else None


def _line(ax: Any, xs: list[float], ys: list[float | None], **kw: Any) -> None:
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    if pts:
        ax.plot([x for x, _ in pts], [y for _, y in pts], **kw)


def latency_chart(runs: list[tuple[str, dict[str, Any]]], loads: list[str]) -> str:
    """TTFT, TPOT/ITL and E2E p50/p90/p99 per step, the plan's p50 beside them, the SLOs."""
    xs, label, log = _x_axis(loads)
    fig = figure(cols=3, width=11, height=3.6)
    for ax, (title, keys, pred_key, slo_key) in zip(fig.axes, LATENCY, strict=True):
        for i, (name, rep) in enumerate(runs):
            steps = {s["load"]: s for s in rep.get("steps", [])}
            color = RUN_COLORS[i % 2]
            for key in keys:
                for pct, style in PCTS:
                    if key == "itlMs" and pct != "p50":
                        continue  # ITL p50 beside TPOT, not six more lines
                    ys = [_pct(steps[ld]["measured"], key, pct) if ld in steps else None
                          for ld in loads]
                    tag = f"{name} " if len(runs) > 1 else ""
                    what = "ITL" if key == "itlMs" else pct
                    _line(ax, xs, ys, color=color if key != "itlMs" else "tab:green",
                          linestyle=style, marker="o", markersize=3, label=f"{tag}{what}")
            if i == 0 or len(runs) == 1:
                pred = [(steps[ld].get("predicted") or {}).get(pred_key) if ld in steps else None
                        for ld in loads]
                _line(ax, xs, pred, **PLAN)
        slo = (runs[0][1].get("workload") or {}).get(slo_key) if slo_key else None
        if slo:
            ax.axhline(slo, color="tab:red", linewidth=1, label=f"SLO {slo:g} ms")
        ax.set_title(title)
        _setup_x(ax, xs, label, log, loads)
        ax.set_ylim(bottom=0)
        if ax.has_data():
            ax.legend(fontsize=7)
    return to_svg(fig)


def throughput_chart(runs: list[tuple[str, dict[str, Any]]]) -> str:
    """Output tokens/s against TPOT p50 and E2E p50, one point per step, the plan's beside."""
    fig = figure(cols=2, width=11, height=3.8)
    for ax, (key, title) in zip(fig.axes, (("tpotMs", "TPOT p50 (ms)"),
                                            ("e2elMs", "E2E latency p50 (ms)")), strict=True):
        for i, (name, rep) in enumerate(runs):
            pts, plan = [], []
            for s in rep.get("steps", []):
                m, pr = s["measured"], s.get("predicted") or {}
                x, y = _pct(m, key, "p50"), m.get("outputThroughput")
                if x is not None and y is not None:
                    pts.append((x, y, s["load"]))
                if pr.get(key) is not None and pr.get("outputThroughput") is not None:
                    plan.append((pr[key], pr["outputThroughput"]))
            if pts:
                ax.plot([a for a, _, _ in pts], [b for _, b, _ in pts], marker="o",
                        color=RUN_COLORS[i % 2], label=f"{name} measured")
                for a, b, ld in pts:
                    ax.annotate(ld, (a, b), fontsize=7, xytext=(3, 3), textcoords="offset points")
            if plan and (i == 0 or len(runs) == 1):
                ax.plot([a for a, _ in plan], [b for _, b in plan], **PLAN)
        ax.set_xlabel(title)
        ax.set_ylabel("output tokens/s")
        ax.set_xlim(left=0)
        ax.set_ylim(bottom=0)
        if ax.has_data():
            ax.legend(fontsize=7)
    return to_svg(fig)


def goodput_chart(runs: list[tuple[str, dict[str, Any]]], loads: list[str]) -> str:
    """Requests/s completed and requests/s that met both SLOs (goodput), per step."""
    fig = figure(width=11, height=3.4)
    ax = fig.axes[0]
    width = 0.8 / (2 * len(runs))
    for i, (name, rep) in enumerate(runs):
        steps = {s["load"]: s for s in rep.get("steps", [])}
        for j, (key, what, alpha) in enumerate((("requestThroughput", "requests/s", 0.45),
                                                ("requestGoodput", "goodput req/s", 1.0))):
            ys = [(steps[ld]["measured"].get(key) or 0.0) if ld in steps else 0.0 for ld in loads]
            off = (2 * i + j - (2 * len(runs) - 1) / 2) * width
            tag = f"{name} " if len(runs) > 1 else ""
            ax.bar([k + off for k in range(len(loads))], ys, width, alpha=alpha,
                   color=RUN_COLORS[i % 2], label=tag + what)
    ax.set_xticks(range(len(loads)), loads)
    ax.set_ylabel("requests/s")
    ax.legend(fontsize=7)
    return to_svg(fig)


ROLE_BARS = (  # (title, value of one instance's row)
    ("peak running", lambda r: (r.get("peak") or {}).get("running")),
    ("peak waiting", lambda r: (r.get("peak") or {}).get("waiting")),
    ("peak KV cache usage (%)",
     lambda r: None if (r.get("peak") or {}).get("kv_usage") is None
     else 100 * r["peak"]["kv_usage"]),
    ("prompt tokens received over KV connector", lambda r: r.get("kv_tokens_received")),
    ("KV connector errors", lambda r: sum((r.get("connector_errors") or {}).values())),
    ("preemptions", lambda r: r.get("preemptions")),
)


def roles_chart(rep: dict[str, Any]) -> str | None:
    """What each engine's /metrics saw per step, bars grouped by step, one bar per instance
    (its role in the legend). None where no step has per-instance metrics."""
    steps = rep.get("steps", [])
    names: list[tuple[str, str]] = []
    for s in steps:
        for row in (s.get("metrics") or {}).get("instances", []):
            if (row["name"], row.get("role", "?")) not in names:
                names.append((row["name"], row.get("role", "?")))
    if not names:
        return None
    fig = figure(cols=3, rows=2, width=11, height=3.0)
    width = 0.8 / len(names)
    for ax, (title, get) in zip(fig.axes, ROLE_BARS, strict=True):
        top = 0.0
        for i, (name, role) in enumerate(names):
            ys = []
            for s in steps:
                rows = {r["name"]: r for r in (s.get("metrics") or {}).get("instances", [])}
                v = get(rows[name]) if name in rows else None
                ys.append(v or 0.0)
            top = max(top, *ys)
            off = (i - (len(names) - 1) / 2) * width
            ax.bar([k + off for k in range(len(steps))], ys, width, label=f"{name} ({role})")
        ax.set_title(title)
        ax.set_xticks(range(len(steps)), [s["load"] for s in steps], fontsize=7)
        ax.set_ylim(0, None if top > 0 else 1)  # all zero: 0..1, not a negative axis
    fig.axes[0].legend(fontsize=7)
    return to_svg(fig)


def _loads(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    out: list[str] = []
    for _, rep in runs:
        for s in rep.get("steps", []):
            if s["load"] not in out:
                out.append(s["load"])
    return out


def _about(rep: dict[str, Any]) -> str:
    w = rep.get("workload") or {}
    rows = [
        ("deployment", f"{rep.get('name')} (phase {rep.get('phase')})"),
        ("spec hash", rep.get("specHash")), ("created", rep.get("createdAt")),
        ("pdctl", rep.get("pdctl")), ("endpoint", rep.get("endpoint")),
        ("plan", (rep.get("plan") or {}).get("basis")),
        ("workload", f"{w.get('promptTokens')} prompt / {w.get('outputTokens')} output tokens; "
                     + (f"SLOs TTFT {p.num(w.get('ttftMs'))} ms, TPOT {p.num(w.get('tpotMs'))} ms"
                        if w.get("ttftMs") or w.get("tpotMs") else "no SLOs")),
    ]
    return p.table(("", ""), rows)


def _engines(rep: dict[str, Any]) -> str:
    rows = []
    for e in rep.get("engines", []):
        flags = " ".join(f"{k} {v}".strip() for k, v in sorted((e.get("flags") or {}).items()))
        rows.append((e.get("name"), e.get("role"), e.get("host"), e.get("version"), flags))
    return p.table(("engine", "role", "host", "vLLM", "flags"), rows)


def capped_text(cap: dict[str, Any]) -> str:
    """A step's `capped` record as one sentence (the CLI's table and the HTML report)."""
    return f"asked {cap['asked']}, sent with at most {cap['concurrency']} in flight: {cap['why']}"


def _steps_table(rep: dict[str, Any]) -> str:
    rows = []
    for s in rep.get("steps", []):
        m, pr, ra = s["measured"], s.get("predicted") or {}, s.get("ratio") or {}
        rows.append((s["load"], m.get("completed"), m.get("failed"),
                     _pct(m, "ttftMs", "p50"), pr.get("ttftMs"), ra.get("ttftMs"),
                     _pct(m, "tpotMs", "p50"), pr.get("tpotMs"), ra.get("tpotMs"),
                     m.get("outputThroughput"), pr.get("outputThroughput"),
                     ra.get("outputThroughput"), m.get("requestGoodput")))
    notes = [p.para(f"{s['load']}: {capped_text(s['capped'])}", "note")
             for s in rep.get("steps", []) if s.get("capped")]
    table = p.table(("load", "done", "failed", "TTFT p50", "plan", "ratio", "TPOT p50", "plan",
                     "ratio", "output tok/s", "plan", "ratio", "goodput req/s"), rows)
    return table + "".join(notes)


TIMELINE_NOTE = ("The per-role charts show each step's figures (peaks of the /metrics samples "
                 "taken every second, counters over the step). This report holds no samples "
                 "over time (written before pdctl bench kept them): no timeline within a step.")
TIMELINES = (  # (title, the series of one instance's timeline, scale)
    ("running requests", "running", 1.0),
    ("waiting requests", "waiting", 1.0),
    ("KV cache usage (%)", "kvUsage", 100.0),
    ("prompt tokens received over the KV connector", "kvReceived", 1.0),
)


def timeline_chart(step: dict[str, Any]) -> str | None:
    """One step's /metrics samples over time, one line per engine instance (its role in the
    legend); None where the step kept no samples."""
    rows = [r for r in (step.get("metrics") or {}).get("instances", [])
            if len((r.get("timeline") or {}).get("t") or ()) > 0]
    if not rows:
        return None
    fig = figure(cols=4, rows=1, width=12, height=2.8)
    for ax, (title, key, scale) in zip(fig.axes, TIMELINES, strict=True):
        for r in rows:
            tl = r["timeline"]
            pts = [(t, v * scale) for t, v in zip(tl["t"], tl.get(key) or (), strict=False)
                   if v is not None]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker=".", markersize=3,
                        label=f"{r['name']} ({r.get('role', '?')})")
        ax.set_title(title)
        ax.set_xlabel("seconds into the step")
        ax.set_ylim(0, None)
    fig.axes[0].legend(fontsize=7)
    return to_svg(fig)


def _timelines(rep: dict[str, Any]) -> list[str]:
    charts = [(s["load"], timeline_chart(s)) for s in rep.get("steps", [])]
    return [p.chart(svg, f"step {load}: each engine's /metrics, sampled about every second")
            for load, svg in charts if svg is not None]


def _charts(runs: list[tuple[str, dict[str, Any]]]) -> list[str]:
    loads = _loads(runs)
    out = []
    if not loads:
        return [p.para("No load steps in this report (a canary-only run).", "note")]
    out.append(p.section(
        "Latency", p.chart(latency_chart(runs, loads),
                           "p50 solid, p90 dashed, p99 dotted, as vllm bench serve measured them "
                           "at the client; black crosses: what pdctl plan predicted (p50); red: "
                           "the workload's SLO.")))
    out.append(p.section(
        "Throughput against latency", p.chart(throughput_chart(runs),
                                              "one point per step; where the curve turns up "
                                              "the deployment saturates.")))
    w = runs[0][1].get("workload") or {}
    has_goodput = any(s["measured"].get("requestGoodput") is not None
                      for _, rep in runs for s in rep.get("steps", []))
    if (w.get("ttftMs") or w.get("tpotMs")) and has_goodput:
        out.append(p.section(
            "Goodput", p.chart(goodput_chart(runs, loads),
                               f"requests/s completed (light) and requests/s that met the SLOs "
                               f"(TTFT {p.num(w.get('ttftMs'))} ms, TPOT "
                               f"{p.num(w.get('tpotMs'))} ms; dark).")))
    return out


def bench_html(rep: dict[str, Any]) -> str:
    """One run's report page."""
    title = f"pdctl bench: {rep.get('name')} (spec {rep.get('specHash')})"
    parts = [p.section("Run", _about(rep)), p.section("Engines", _engines(rep))]
    c = rep.get("canary")
    if c is not None:
        parts.append(p.section("P/D canary", p.para(
            c.get("verdict") or ("passed" if c.get("ok") else "FAILED"),
            "" if c.get("ok") else "bad")))
    if rep.get("steps"):
        parts.append(p.section("Steps: measured beside the plan", _steps_table(rep)))
    parts += _charts([("run", rep)])
    roles = roles_chart(rep)
    if roles is not None:
        lines = _timelines(rep)
        parts.append(p.section("Per role, per step (/metrics)",
                               p.chart(roles, "one bar per engine instance"),
                               *(lines or [p.para(TIMELINE_NOTE, "note")])))
    return p.page(title, *parts)


def compare_html(a: dict[str, Any], b: dict[str, Any], diffs: list[str]) -> str:
    """Two runs on the same axes (A blue, B orange), the plan's prediction of A's spec."""
    title = f"pdctl bench: A (spec {a.get('specHash')}) and B (spec {b.get('specHash')})"
    parts = []
    if diffs:
        parts.append(p.section("Engines differ", *(p.para(d, "bad") for d in diffs)))
    parts.append(p.section("A", _about(a), _engines(a), _steps_table(a)))
    parts.append(p.section("B", _about(b), _engines(b), _steps_table(b)))
    parts += _charts([("A", a), ("B", b)])
    return p.page(title, *parts)
