"""The dashboard as rich renderables (pure: no printing; the CLI shows them)."""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from pdctl.top.gpu import kind
from pdctl.top.lora import lora_line
from pdctl.top.verdict import Verdict, limits
from pdctl.top.window import Window, role_totals


def _n(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


def _pair(a: float | None, b: float | None) -> str:
    return f"{_ms(a)}/{_ms(b)}"


NARROW = 132  # columns: under this the instance table is two (load; latency and KV)
LOAD_COLUMNS = ("run", "wait", "req/s", "prompt t/s", "gen t/s")
LATENCY_COLUMNS = ("TTFT p50/p95 ms", "ITL p50/p95 ms", "KV", "prefix hit", "preempt",
                   "KV recv tok")


# the latency table's headers at NARROW (p50/p95 pairs; prefix-cache hit rate; preemptions)
SHORT = {"TTFT p50/p95 ms": "TTFT ms", "ITL p50/p95 ms": "ITL ms", "prefix hit": "prefix",
         "preempt": "preempt", "KV recv tok": "KV recv"}


GPU_SHORT = {"DRAM bw %": "DRAM %", "tensor %": "tens %", "mem MiB": "mem", "power W": "W",
             "source": "src"}


def _instance_cells(f: Any) -> dict[str, str]:
    return {
        "run": _n(f.running, ".0f"), "wait": _n(f.waiting, ".0f"),
        "req/s": _n(f.request_rate, ".2f"), "prompt t/s": _n(f.prompt_tps),
        "gen t/s": _n(f.generation_tps), "TTFT p50/p95 ms": _pair(f.ttft_p50, f.ttft_p95),
        "ITL p50/p95 ms": _pair(f.itl_p50, f.itl_p95), "KV": _n(f.kv_usage, ".0%"),
        "prefix hit": _n(f.prefix_hit_rate, ".0%"), "preempt": _n(f.preemptions, ".0f"),
        "KV recv tok": _n(f.kv_tokens_received, ".0f"),
    }


def _instance_table(w: Window, title: str | None, columns: tuple[str, ...], where: bool) -> Any:
    """The instances with `columns` of their figures (`where`: with role and where)."""
    inst = Table(title=title, title_justify="left", expand=False, pad_edge=False)
    keys = ("instance", "role", "where") if where else ("instance",)
    for col in keys:
        inst.add_column(col, justify="left", no_wrap=True)
    for col in columns:
        inst.add_column(SHORT.get(col, col) if not where else col, justify="right", no_wrap=True)
    for f in w.instances:
        names = (f.name, f.role, f.where)[: len(keys)]
        if f.error:
            inst.add_row(*names, Text(f.error, style="red"), *[""] * (len(columns) - 1))
            continue
        cells = _instance_cells(f)
        inst.add_row(*names, *[cells[c] for c in columns])
    return inst


def render(w: Window, verdicts: list[Verdict], hint: str = "", width: int | None = None) -> Any:
    """The dashboard; `width`: the terminal's columns (under NARROW the instance table is split
    in two, so that no figure is cut to "…" at 80 columns)."""
    answered = [f for f in w.instances if not f.error]
    span = f"window {w.seconds:.0f}s" if answered else "no instance answered"
    title = f"{w.name}  phase {w.phase} ({w.target})  {span}"
    if width is not None and width < NARROW:
        tables = [_instance_table(w, title, LOAD_COLUMNS, True),
                  _instance_table(w, None, LATENCY_COLUMNS, False)]
    else:
        tables = [_instance_table(w, title, LOAD_COLUMNS + LATENCY_COLUMNS, True)]
    roles = Table(title="per role", title_justify="left", pad_edge=False)
    for col in (
        "role", "n", "run", "wait", "req/s", "prompt t/s", "gen t/s", "KV mean", "KV recv tok",
    ):
        roles.add_column(col, justify="left" if col == "role" else "right")
    for role, r in sorted(role_totals(w.instances).items()):
        roles.add_row(
            role, _n(r.get("instances"), ".0f"), _n(r.get("running"), ".0f"),
            _n(r.get("waiting"), ".0f"), _n(r.get("request_rate"), ".2f"), _n(r.get("prompt_tps")),
            _n(r.get("generation_tps")), _n(r.get("kv_usage"), ".0%"),
            _n(r.get("kv_tokens_received"), ".0f"),
        )
    gpus = Table(title="GPUs", title_justify="left", pad_edge=False)
    narrow = width is not None and width < NARROW
    for col in (
        "gpu", "roles", "source", "SM %", "DRAM bw %", "tensor %", "mem MiB", "power W", "reads",
    ):
        gpus.add_column(
            GPU_SHORT.get(col, col) if narrow else col,
            justify="left" if col in ("gpu", "roles", "source", "reads") else "right",
            no_wrap=col != "gpu" or not narrow, min_width=12 if col == "gpu" and narrow else None,
        )
    t = limits()
    for g in w.gpus:
        sm = g.sm_util if g.sm_util is not None else g.util_gpu
        mem = (
            "-"
            if g.mem_used_mib is None
            else (f"{g.mem_used_mib:.0f}/{_n(g.mem_total_mib, '.0f')}")
        )
        if narrow and g.mem_used_mib is not None:  # GiB: MiB pairs take 13 columns
            total = "-" if g.mem_total_mib is None else f"{g.mem_total_mib / 1024:.0f}"
            mem = f"{g.mem_used_mib / 1024:.0f}/{total}G"
        gpus.add_row(
            f"{g.host}/{g.index} {g.name}", ",".join(g.roles) or "-", g.source, _n(sm),
            _n(g.bandwidth), _n(g.tensor_util), mem, _n(g.power_w, ".0f"), kind(g, t),
        )
    parts: list[Any] = [*tables, roles, *[_router(r) for r in w.routers], gpus]
    with_lora = [f for f in answered if f.lora is not None]
    if with_lora:
        parts.append(Text("LoRA adapters with requests (vllm:lora_requests_info):", style="bold"))
        parts += [Text(lora_line(f.name, f.lora)) for f in with_lora if f.lora is not None]
    for why in w.gpu_missing:
        parts.append(Text(f"GPU telemetry missing: {why}", style="yellow"))
    parts.append(Text("verdicts:", style="bold"))
    if not verdicts and not answered:
        parts.append(Text("  none: no instance answered /metrics, so nothing could be judged"))
    elif not verdicts:
        parts.append(Text("  none: nothing crossed a threshold in this window"))
    for v in verdicts:
        parts.append(Text(f"  [{v.key}] {v.line}"))
    if hint:
        parts.append(Text(hint, style="dim"))
    return Group(*parts)


def _router(r: Any) -> Any:
    """vllm-router's row: requests, errors, latency, and what it sent to each worker."""
    if r.error:
        return Text(f"router {r.name}: {r.error}", style="red")
    retries = "" if r.retries is None else f", retries {r.retries:.0f}"
    title = (
        f"router {r.name}  {_n(r.request_rate, '.2f')} req/s, {_n(r.requests, '.0f')} requests, "
        f"{_n(r.errors, '.0f')} errors{retries}, latency p50/p95 "
        f"{_pair(r.latency_p50, r.latency_p95)} ms"
    )
    table = Table(title=title, title_justify="left", pad_edge=False)
    for col in ("worker", "role", "url", "routed", "share", "errors", "health"):
        table.add_column(col, justify="left" if col in ("worker", "role", "url") else "right")
    per_role: dict[str, float] = {}
    for x in r.workers:
        per_role[x.role] = per_role.get(x.role, 0.0) + x.routed
    for x in r.workers:
        total = per_role.get(x.role) or 0.0
        health = {True: "ok", False: "down", None: "-"}[x.healthy]
        if x.breaker and x.breaker != "closed":
            health += f", breaker {x.breaker}"
        table.add_row(
            x.instance, x.role, x.url, f"{x.routed:.0f}",
            f"{x.routed / total:.0%}" if total else "-", f"{x.errors:.0f}",
            Text(health, style="red" if health != "ok" and health != "-" else ""),
        )
    return table
