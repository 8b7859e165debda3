"""A bench report as tables: per step measured / predicted / ratio, per role what /metrics
saw, the canary."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.markup import escape
from rich.table import Table

from pdctl.cli import term
from pdctl.report.bench import capped_text

ROWS = (
    ("TTFT ms", "ttftMs"), ("TPOT ms", "tpotMs"), ("ITL ms", "itlMs"), ("E2E latency ms", "e2elMs"))
RATES = (("requests/s", "requestThroughput"), ("output tok/s", "outputThroughput"),
         ("total tok/s", "totalTokenThroughput"), ("goodput req/s", "requestGoodput"))


def show(report: dict[str, Any]) -> None:
    console = term.console()
    versions = sorted({str(e.get("version")) for e in report["engines"]})
    console.print(
        f"[bold]{report['name']}[/] (phase {report['phase']}, spec {report['specHash']}), "
        f"vLLM {', '.join(versions)}, endpoint {report['endpoint']}; plan: "
        f"{report['plan']['basis']}",
        highlight=False)
    c = report.get("canary")
    if c is not None:
        state = "[green]passed[/]" if c["ok"] else "[red]FAILED[/]"
        pairs = f" for {', '.join(c['failedPairs'])}" if c.get("failedPairs") else ""
        console.print(f"P/D canary {state}{pairs}: {len(c['pairs'])} prompts, KV tokens "
                      f"received {num(c['kvTokensReceived'])}", highlight=False)
        for line in c["failures"]:
            console.print(f"  {escape(line)}", highlight=False)
    for s in report["steps"]:
        m, pred, ratio = s["measured"], s.get("predicted") or {}, s.get("ratio") or {}
        suspect = s.get("failures") or []
        events = len(s.get("kvEvents") or [])
        more = f", [red]{events} suspect KV event{'' if events == 1 else 's'}[/]" if events else ""
        t = Table(title=f"{s['load']}: {m['completed']} done, {m['failed']} failed{more} in "
                        f"{num(m['durationS'])} s (driven from {s['driver']})")
        for col in ("figure", "p50", "p90", "p99", "plan", "p50/plan"):
            t.add_column(col)
        for label, key in ROWS:
            v = m.get(key) or {}
            t.add_row(label, num(v.get("p50")), num(v.get("p90")), num(v.get("p99")),
                      num(pred.get(key)), num(ratio.get(key)))
        for label, key in RATES:
            t.add_row(label, num(m.get(key)), "", "", num(pred.get(key)), num(ratio.get(key)))
        console.print(t)
        if s.get("capped"):  # sent with fewer requests in flight than the step asked
            console.print(f"  [yellow]note[/]: {escape(capped_text(s['capped']))}",
                          highlight=False)
        rows = []
        # every unit is named <deployment>-<role>-<i>: the table names them without the
        # deployment's part (in its title), so that it keeps to 80 columns
        prefix = f"{report['name']}-"
        instances = s["metrics"]["instances"]
        short = bool(instances) and all(r["name"].startswith(prefix) for r in instances)
        for row in instances:
            peak = row.get("peak") or {}
            errs = sum((row.get("connector_errors") or {}).values())
            kv = peak.get("kv_usage")
            name = row["name"][len(prefix):] if short else row["name"]
            rows.append((name, row["role"], num(row.get("requests")),
                         num(row.get("generation_tps")), num(peak.get("running")),
                         num(peak.get("waiting")), "-" if kv is None else f"{kv:.0%}",
                         num(row.get("preemptions")), num(row.get("kv_tokens_received")),
                         num(errs)))
        units = f"{prefix}* units, " if short else ""
        r = Table(title=f"per role over the step ({units}peaks from /metrics every second)",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
        # Readable at 80 columns: short two-line headers, no vertical rules, and every
        # column at least as wide as its longest word or figure, so nothing is cut.
        headers = ("instance", "role", "reqs", "gen\ntok/s", "peak\nrun", "peak\nwait",
                   "peak\nKV", "pre-\nempt", "KV in\ntok", "conn\nerr")
        for i, col in enumerate(headers):
            widest = max([len(word) for word in col.split("\n")] + [len(x[i]) for x in rows])
            r.add_column(col, justify="left" if i < 2 else "right", no_wrap=True, min_width=widest)
        for cells in rows:
            r.add_row(*cells)
        console.print(r)
        for line in suspect:  # a failure of the step, with the pair and the log lines
            console.print(f"  [red]FAILED[/] suspect KV: {escape(line)}", highlight=False)
        for g in s["metrics"].get("gpus", []):
            console.print(f"  GPU {g['host']}:{g['index']} {g['name']} ({'/'.join(g['roles'])}): "
                          f"SM {num(g['sm_util'])}%, DRAM bandwidth {num(g['dram_bw_util'])}%, "
                          f"tensor {num(g['tensor_util'])}%, memory {num(g['mem_used_mib'])} "
                          "MiB", highlight=False)


def num(v: Any) -> str:
    return "-" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)
