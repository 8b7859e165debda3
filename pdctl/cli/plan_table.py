"""The rich tables `pdctl plan` prints. rich is imported inside `show` only."""

from __future__ import annotations

from typing import Any

from rich import box
from rich.table import Table

from pdctl.capacity.lora import host_bytes
from pdctl.capacity.profile import flashinfer_only, nvlink
from pdctl.capacity.roofline import TIME_SLICE_EFFICIENCY, time_slice_basis
from pdctl.cli.term import console as make_console

GIB = 1024**3


def _gib(value: float) -> str:
    return f"{value / GIB:,.2f} GiB"


def _mib(value: float) -> str:
    return f"{value / 1024**2:,.1f} MiB"


def _bytes(value: int) -> str:
    return f"{value:,} B ({value / 1024:,.0f} KiB)" if value >= 1024 else f"{value} B"


def _lora_rows(m: Any, s: Any, wide: bool = True) -> list[tuple[str, str, str]]:
    """The LoRA buffers (part of the weights) and the adapters' host memory (docs/lora.md)."""
    if s.lora is None:
        return []
    lo = s.lora
    lost = m.lora // (m.kv_per_token * m.block_size) * m.block_size if m.kv_per_token else 0
    return [("  of which LoRA buffers",
             f"{_mib(m.lora)} (-{lost:,} KV tokens)" if wide else _mib(m.lora),
             f"maxLoras {lo.slots} x maxLoraRank {lo.rank} x (A: rank x in + B: out x rank) of "
             "every LoRA-able layer, embedding and lm_head, per GPU"),
            ("LoRA adapters in host memory", _mib(host_bytes(lo)),
             f"maxCpuLoras {lo.cpu_slots} x the largest adapter ({_mib(lo.adapter_bytes)}: "
             "rank x (in + out) of its target modules x layers x bytes)")]


def _memory_rows(r: Any, wide: bool = True) -> list[tuple[str, str, str]]:
    """The memory rows: (label, value, how). Not `wide`: the short values of the compact
    table (80 columns, no "how"): `-o wide` shows the whole figure and how it is made."""
    m, s = r.memory, r.shape
    batched, seqs = s.batching(m.total, m.max_model_len)
    util = f"{r.util:.2f}" + (" (spec)" if r.util_from_spec else " (recommended)")
    other = r.util_from_spec and r.recommended_util is not None and r.recommended_util != r.util
    if other:
        util += f"; recommended {r.recommended_util:.2f}"
    util += f"; least {m.min_util:.2f}"
    if not wide:
        spec_or_rec = "(spec)" if r.util_from_spec else "(rec.)"
        util = f"{r.util:.2f} " + (f"(rec. {r.recommended_util:.2f})" if other else spec_or_rec)
    overheads = (f"{_gib(m.overhead.activation)} + "
                 f"{_gib(m.overhead.cuda_graphs)}"
                 + ("" if m.overhead.graphs_counted else " (not counted)")
                 + f" + {_gib(m.overhead.non_torch)}"
                 if wide
                 else _gib(m.overhead.activation
                           + (m.overhead.cuda_graphs if m.overhead.graphs_counted else 0)
                           + m.overhead.non_torch))
    smallest = (f"{_compact_shape(r.smallest.tp, r.smallest.pp, r.smallest.dp, r.smallest.ep)}, "
                f"util {r.smallest_util:.2f}"
                if not wide and r.smallest and r.smallest_util is not None
                else f"TP {r.smallest.tp}"
                + (f" x PP {r.smallest.pp}" if r.smallest.pp > 1 else "")
                + (f" x DP {r.smallest.dp}" if r.smallest.dp > 1 else "")
                + (f" (EP {r.smallest.ep})" if r.smallest.ep else "")
                + f" at util {r.smallest_util:.2f}"
                if r.smallest and r.smallest_util is not None
                else "none up to 8 GPUs x 8 stages" if wide else "none (8 GPUs x 8 stages)")
    per_rank = " per DP rank" if s.dp > 1 else ""
    kv_token = (_bytes(m.kv_per_token_all_layers)
                if wide or m.kv_per_token_all_layers < 1024
                else f"{m.kv_per_token_all_layers / 1024:,.0f} KiB")
    return [_gpus_row(s, wide),
            ("weights / GPU", _gib(m.weights),
             "dense params x bytes/param / TP + expert params x bytes/param / EP (experts whole, "
             "over TP x DP GPUs); heaviest PP stage"
             if s.ep and s.ep != s.tp
             else "params x bytes/param / TP (heaviest PP stage)"),
            *_lora_rows(m, s, wide),
            ("KV / token / GPU", kv_token,
             "2 x layers x KV heads per GPU x head_dim x bytes (MLA: latent x layers x bytes)"
             + (f"; {m.layout.sliding_layers} of {m.layout.full_layers + m.layout.sliding_layers}"
                f" layers sliding-window: a sequence keeps at most {m.layout.window:,} - 1 + "
                f"{m.layout.in_flight:,} in-flight tokens there"
                if m.layout is not None and m.layout.sliding_layers
                else f"; hybrid: {m.layout.full_layers} full-attention layers keep KV, "
                f"{m.layout.linear_layers} linear/Mamba layers one state a sequence "
                f"({m.layout.state_bytes:,} B, block {m.layout.block_size} tokens)"
                if m.layout is not None
                else "")),
            (f"KV / {m.max_model_len:,}-token sequence", _gib(m.kv_per_sequence),
             "KV / token x maxModelLen"
             if m.layout is None
             else "full-attention layers: maxModelLen in blocks, + 1 state block a linear/Mamba "
             "layer group (vLLM's max_memory_usage_bytes)"
             if not m.layout.sliding_layers
             else "full-attention layers: maxModelLen; sliding-window layers: their window + "
             "in-flight tokens, at most maxModelLen, + 1 block (vLLM's max_memory_usage_bytes)"),
            ("activation + graphs + other" if wide else "activation+graphs+other", overheads,
             f"vLLM {s.engine} profile: max("
             f"forward over {batched:,} tokens, sampler over {seqs:,} x vocab"
             + (", FlashInfer only" if flashinfer_only(s.engine, s.flashinfer_sampler) else "")
             + "); CUDA graphs; CUDA context"
             + ((" + NVLink" if nvlink(s.gpu) else " + PCIe") + " all-reduce" if s.tp > 1 else "")),
            ("memory vLLM sees", _gib(m.total), "CUDA total of the GPU (or HAMi slice)"),
            ("--gpu-memory-utilization", util,
             "least = weights + overheads + one sequence, over total"),
            ("KV cache memory", _gib(m.kv_available), "total x util - weights - overheads"),
            (("KV cache size (vLLM's count)" if wide else "KV cache tokens") + per_rank,
             f"{m.kv_tokens:,} tokens",
             "vLLM's 'GPU KV cache size': concurrency at maxModelLen x maxModelLen"
             + (" (context tokens: a long sequence keeps only its window in sliding layers)"
                if m.layout is not None and not _same_tokens(m)
                else " (= KV memory / KV per token, whole blocks)")
             + ("; each DP rank has its own cache" if s.dp > 1 else "")),
            *([("KV cache size per instance", f"{m.kv_tokens * s.dp:,} tokens",
                f"x {s.dp} DP ranks")]
              if s.dp > 1
              else []),
            *([("KV tokens stored at once" + per_rank, f"{m.kv_token_slots:,} tokens",
                "the pool's blocks x block size / block groups a token takes (every layer "
                "of each token): what sequences shorter than the window can fill")]
              if m.layout is not None and not _same_tokens(m)
              else []),
            ("concurrency at maxModelLen" + per_rank, f"{m.concurrency:.2f}x",
             "vLLM's 'Maximum concurrency': the pool's blocks / blocks one maxModelLen "
             "sequence takes"),
            ("fits", "yes" if r.fits else "NO", "weights + overheads + one max-length sequence"),
            ("smallest fit on this GPU", smallest,
             "TP 1, 2, 4, 8, then PP across nodes; each at the util above, then at 0.95")]


def _same_tokens(m: Any) -> bool:
    """vLLM's count and the tokens stored at once agree within 1% (no sliding window cuts
    a max-length sequence short)."""
    return abs(m.kv_tokens - m.kv_token_slots) <= 0.01 * max(1, m.kv_token_slots)


def _compact_shape(tp: int, pp: int, dp: int, ep: int | None) -> str:
    """TP 2 PP 2 DP 4 EP 8: the factors above 1 (TP always), for the compact table."""
    return f"TP {tp}" + "".join(
        f" {name} {n}" for name, n in (("PP", pp), ("DP", dp), ("EP", ep or 1)) if n > 1)


def _gpus_row(s: Any, wide: bool = True) -> tuple[str, str, str]:
    """GPUs of one instance: TP x PP x DP, and how expert parallel spreads the experts."""
    parts = f"TP {s.tp}, PP {s.pp}" + (f", DP {s.dp}" if s.dp > 1 else "")
    if s.ep:
        parts += f"; experts over EP {s.ep}"
    if not wide:
        parts = _compact_shape(s.tp, s.pp, s.dp, s.ep)
    how = "tensorParallel x PP" + (" x dataParallel" if s.dp > 1 else "")
    return ("GPUs per instance", f"{s.tp * s.pp * s.dp} ({parts})", how)


def _slice_rows(r: Any, wide: bool = True) -> list[tuple[str, str, str]]:
    s = r.slice
    if s is None:
        return []
    return [("HAMi slice (nvidia.com/gpumem)", f"{s.slice_mib:,} MiB", "decode.share"),
            ("slices per GPU",
             f"{s.per_gpu} (room for {s.max_per_gpu} minimal)"
             if wide
             else f"{s.per_gpu} (room for {s.max_per_gpu})",
             "GPU memory / smallest slice"),
            ("smallest slice", f"{s.min_slice_mib:,} MiB",
             "256 MiB steps whose util holds weights + overheads + one sequence"),
            ("util inside slice", f"{s.gpu_memory_utilization:.2f}",
             "(slice - 768 MiB context - 1,536 MiB graphs unless eager - 512 MiB per extra "
             "TP rank) / slice, at most 0.95")]


_STEP = "modelled: (weights + KV read) / HBM bandwidth at the efficiency measured on an H200"
_PREFILL = "modelled: 50% of peak FLOP/s (assumed MFU) / FLOPs per token"


def _sliced(per_gpu: int) -> str:
    return (f"; {per_gpu} instances time-slice one GPU: each at {TIME_SLICE_EFFICIENCY:.2f}/"
            f"{per_gpu} of its speed alone ({time_slice_basis(per_gpu)}"
            + (" on an H200, 2-4 instances)"
               if time_slice_basis(per_gpu) == "measured"
               else ": measured for 2-4 instances only)"))


def _speed_rows(r: Any, wide: bool = True) -> list[tuple[str, str, str]]:
    d = r.decode
    per_gpu = d.per_gpu if r.role != "prefill" else 1
    sliced = _sliced(per_gpu) if per_gpu > 1 else ""
    rows = [("decode batch", "-", "modelled: min(max-num-seqs, KV, TPOT)"),
            ("decode step", "-", _STEP + sliced),
            ("decode tokens/s per instance", "-", "modelled: batch / step (x DP ranks)"),
            ("decode tokens/s per GPU", "-",
             "modelled: per instance x instances per GPU / GPUs per instance"),
            ("prefill tokens/s", "-", _PREFILL)]
    if not r.fits:  # no KV: no speed figures (the fit advice says what it needs)
        return rows
    if r.role == "prefill":
        rows[4] = (rows[4][0], f"{r.prefill_tokens_per_s:,.0f}", rows[4][2])
        return rows
    gpus = r.shape.tp * r.shape.pp * r.shape.dp
    per_instance = d.tokens_per_s * r.shape.dp  # every DP rank decodes its own batch
    return [("decode batch",
             f"{r.batch} x {d.context:,} tokens"
             + (" per DP rank" if r.shape.dp > 1 and wide else "/rank" if r.shape.dp > 1 else ""),
             rows[0][2]),
            ("decode step",
             f"{d.step_bound_s * 1000:.2f} ms bound, {d.tpot_ms:.2f} ms expected"
             if wide
             else f"{d.tpot_ms:.2f} ms (bound {d.step_bound_s * 1000:.2f})",
             rows[1][2]),
            ("decode tokens/s per instance",
             f"{per_instance:,.0f} (bound {d.tokens_per_s_bound * r.shape.dp:,.0f})", rows[2][2]),
            ("decode tokens/s per GPU", f"{per_instance * per_gpu / gpus:,.0f}", rows[3][2]),
            ("prefill tokens/s", f"{r.prefill_tokens_per_s:,.0f}", rows[4][2])]


def union_rows(per_role: list[list[tuple[str, str, str]]]) -> list[tuple[str, list[str], str]]:
    """The rows of all roles, each label once, in the order the roles first give them (the
    decode role's HAMi slice rows after the memory rows); "-" where a role has no such row."""
    labels: dict[str, str] = {}
    shown: set[str] = set()  # labels whose "how" is of a role that has the figure
    for rows in per_role:
        for label, value, how in rows:
            if label not in labels or (value != "-" and label not in shown):
                labels[label] = how
            if value != "-":
                shown.add(label)
    values = [{label: value for label, value, _ in rows} for rows in per_role]
    return [(label, [v.get(label, "-") for v in values], how) for label, how in labels.items()]


_SHORT = {  # the compact table's labels: at most 24 characters, never wrapped
    "KV cache tokens": "KV cache tokens",
    "KV cache size per instance": "KV tokens per instance",
    "KV tokens stored at once": "KV tokens stored at once",
    "concurrency at maxModelLen": "max-length concurrency",
    "LoRA adapters in host memory": "LoRA adapters (host)",
    "HAMi slice (nvidia.com/gpumem)": "HAMi slice (gpumem)",
    "decode tokens/s per instance": "decode tok/s per instance",
    "decode tokens/s per GPU": "decode tok/s per GPU",
}


def short_label(label: str) -> str:
    """A row's label in the compact table ("per DP rank" as "/rank")."""
    rank = label.endswith(" per DP rank")
    base = label.removesuffix(" per DP rank")
    if base.startswith("KV / ") and base.endswith("-token sequence"):
        base = base.removesuffix("-token sequence") + "-token seq."
    base = _SHORT.get(base, base)
    return base + "/rank" if rank else base


def show(plan: Any, origin: str, wide: bool = False) -> None:
    """Print the capacity plan as tables, then the P:D ratio and the packing advice.

    The default table is compact (figures only, readable at 80 columns); `wide` (`-o wide`,
    the kubectl habit) adds the "how" column and the whole figures (docs/capacity.md)."""
    console = make_console(piped_width=132)
    model, gpu = plan.model, plan.gpu
    source = ("built-in table"
              if model.from_table
              else (f"paramsBillion, shapes of {model.shapes_from} (KV estimated)"
                    if model.shapes_from
                    else "model.config"))
    active = f", {model.active_params / 1e9:.1f}B active" if model.is_moe else ""
    # a GPU of given memory only is named '180 GiB GPU' (gpus.custom_gpu): no second "GPU"
    named = f"[bold]{gpu.name}[/]" if gpu.name.endswith(" GPU") else f"GPU [bold]{gpu.name}[/]"
    console.print(f"[bold]{model.name}[/]: {_params(model.params)}{active} "
                  f"({source}); {named} ({gpu.memory_mib:,} MiB, "
                  f"{gpu.bandwidth_gbs:,.0f} GB/s, {gpu.bf16_tflops:,.0f} TFLOP/s; {origin}); "
                  f"phase {plan.phase}")
    for title, rows_of in (
        ("memory per GPU", lambda r: _memory_rows(r, wide) + _slice_rows(r, wide)),
        ("speed (roofline)", lambda r: _speed_rows(r, wide)),
    ):
        compact: dict[str, Any] = {"box": box.SIMPLE_HEAD, "show_edge": False}
        table = Table(title=title, title_justify="left", **({} if wide else compact))
        table.add_column("", no_wrap=not wide)
        for r in plan.roles:
            table.add_column(f"{r.role} x{r.replicas}", justify="right")
        if wide:
            table.add_column("how", style="dim")
        for label, values, how in union_rows([rows_of(r) for r in plan.roles]):
            table.add_row(*([label, *values, how] if wide else [short_label(label), *values]))
        console.print(table)
    if not wide:
        console.print("[dim]how each figure is made: pdctl plan -o wide[/]")
    for text in plan.warnings:
        console.print(f"[bold yellow]warning:[/] {text}")
    for r in plan.roles:
        if not r.fits and r.memory.beside_short and r.memory.fits_budget:
            console.print(f"[bold red]{r.role} does not fit[/] at util {r.util:.2f}: its "
                          "budget and the P2pNccl buffer exceed the GPU (exit code 1).")
        elif not r.fits and r.memory.refused:
            console.print(f"[bold red]{r.role} does not start[/]: {r.memory.refused} "
                          "(exit code 1).")
        elif not r.fits:
            console.print(f"[bold red]{r.role} does not fit[/] at util {r.util:.2f}: vLLM "
                          "would refuse to start it (exit code 1).")
            for alt in r.alternatives:
                console.print(f"  nearest that fits: {alt.change} ({alt.kv_tokens:,} tokens)")
    if not plan.fits:
        console.print(f"[bold]advice ({plan.advice.case}):[/]")
        for text in plan.advice.lines:
            console.print(f"  - {text}")
        return
    _pd_line(console, plan)
    console.print(f"[bold]packing advice ({plan.advice.case}):[/]")
    for text in plan.advice.lines:
        console.print(f"  - {text}")


def _pd_line(console: Any, plan: Any) -> None:
    pd, t, gpu = plan.pd, plan.traffic, plan.gpu
    line = (f"P:D for {t.prompt_tokens:,} in / {t.output_tokens:,} out: "
            f"{pd.prefill_per_decode:.2f} prefill instances per decode instance")
    if plan.phase in (0, 1):  # one instance prefills and decodes: no P:D, the targets only
        line = f"latency for {t.prompt_tokens:,} in / {t.output_tokens:,} out"
    elif pd.prefill_instances is not None:
        line += (f"; at {t.requests_per_second:g} req/s: {pd.prefill_instances} prefill, "
                 f"{pd.decode_instances} decode ({pd.decode_concurrency:.0f} sequences decoding)")
    if pd.ttft_ok is not None:
        line += f"; TTFT target {'met' if pd.ttft_ok else 'NOT met'} by prefill compute alone"
    if pd.tpot_ok is False:
        line += (f"; TPOT target NOT met: even one sequence takes {pd.batch1_tpot_ms:.2f} ms per "
                 f"token on {'an' if gpu.name[0] in 'AEHILR' else 'a'} {gpu.name}")
    if plan.phase in (2, 3) or pd.ttft_ok is not None or pd.tpot_ok is False:
        console.print(line)


def show_comparison(data: dict[str, Any]) -> None:
    """Print `--from-log`: predicted vs observed per memory term."""
    console = make_console(piped_width=132)
    if data.get("otherModel"):
        console.print(f"note: the log is of another model ({data['model']}) than the plan's "
                      f"({data['planModel']}): its figures are shown beside the prediction, "
                      "not as errors of it")
    title = f"predicted vs the log ({data['role']}"
    title += f", vLLM {data['version']})" if data["version"] else ")"
    table = Table(title=title, title_justify="left")
    for name, justify in (
        ("term", "left"), ("predicted", "right"), ("observed", "right"), ("error", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for t in data["terms"]:
        fmt = {
            "GiB": lambda v: f"{v:,.2f} GiB", "x": lambda v: f"{v:,.2f}x",
        }.get(t["unit"], lambda v: f"{v:,}")
        seen = "-" if t["observed"] is None else fmt(t["observed"])
        err = "-" if t["errorPct"] is None else f"{t['errorPct']:+.1f}%"
        if data.get("otherModel") and t["observed"] is not None:
            err = "n/a"  # another model: no error of this prediction
        table.add_row(t["term"], fmt(t["predicted"]), seen, err)
    console.print(table)
    if data["conditions"]:
        console.print("predicted under the log's conditions: " + "; ".join(data["conditions"]))
    if data["graphsCapturedGib"] is not None:
        console.print(f"CUDA graphs captured after the KV cache: {data['graphsCapturedGib']:.2f} "
                      "GiB (taken from what util leaves over)")
    pinned = data["observedUnderPlan"]
    if pinned is not None and not data.get("otherModel"):  # another model's KV: no measure
        slots = pinned.get("kvTokenSlots", pinned["kvTokens"])
        stored = f"; {slots:,} stored at once" if slots != pinned["kvTokens"] else ""
        console.print(f"with the observed {pinned['kvAvailableGib']:.2f} GiB of KV memory the "
                      f"plan's shape holds {pinned['kvTokens']:,} tokens (vLLM's count{stored})"
                      f" ({'fits' if pinned['fits'] else 'does NOT fit'} one max-length "
                      "sequence)")


def _decimals(value: float) -> int:
    """Decimals a table figure gets: whole from 1,000, then 1, 2 and 3 as it shrinks."""
    size = abs(value)
    return 0 if size >= 1000 else 1 if size >= 100 else 2 if size >= 1 else 3


def figure(value: float, decimals: int | None = None) -> str:
    """A table figure: thousands separated, never in exponent form, a fixed number of
    decimals (trailing zeros kept, so the cells of a column line up: 11.00, not 11)."""
    return f"{value:,.{_decimals(value) if decimals is None else decimals}f}"


def figure_pair(first: float, second: float) -> str:
    """'p50 (p90)' with the decimals of the smaller, so both read alike: 10.98 (11.00)."""
    places = _decimals(min(abs(first), abs(second)))
    return f"{figure(first, places)} ({figure(second, places)})"


def show_loads(loads: list[dict[str, Any]]) -> None:
    """Print `--load`: one column per load, p50 (p90) of each latency, throughput, goodput."""
    console = make_console(piped_width=132)
    if not loads:
        console.print("speed at a load: none (a role does not fit)")
        return
    table = Table(title="speed at a load (modelled)", title_justify="left")
    table.add_column("")
    for x in loads:
        table.add_column(x["load"], justify="right")

    def lat(key: str) -> list[str]:
        out = []
        for x in loads:
            p = x[key]
            out.append("-" if p.get("p50") is None else figure_pair(p["p50"], p["p90"]))
        return out

    def num(key: str) -> list[str]:
        return ["-" if x[key] is None else figure(x[key]) for x in loads]

    table.add_row("TTFT ms p50 (p90)", *lat("ttftMs"))
    table.add_row("TPOT ms p50 (p90)", *lat("tpotMs"))
    table.add_row("ITL ms p50 (p90)", *lat("itlMs"))
    table.add_row("E2E ms p50 (p90)", *lat("e2elMs"))
    table.add_row("requests/s", *num("requestThroughput"))
    table.add_row("output tokens/s", *num("outputThroughput"))
    if any(x["goodput"] for x in loads):
        table.add_row("goodput req/s (share in SLO)",
                      *["-" if not x["goodput"] else
                        f"{figure(x['goodput']['requestsPerSecond'])} "
                        f"({100 * x['goodput']['shareMeetingSlo']:.0f}%)"
                        for x in loads])
    console.print(table)
    console.print(f"[dim]speed figures: {loads[0]['basis']}[/]")


def show_search(tried: list[Any], load: str) -> None:
    """Print `--search`: each candidate's modelled goodput, p90 latencies and throughput, best
    first (fits 80 columns), and the pick against the spec's own settings."""
    console = make_console(piped_width=132)
    table = Table(title=f"engine settings at {load} (modelled)", title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("settings", no_wrap=True)
    for name in ("goodput/s", "TTFT p90", "TPOT p90", "tok/s"):
        table.add_column(name, justify="right", no_wrap=True)

    def p90(f: dict[str, Any], key: str) -> str:
        v = (f.get(key) or {}).get("p90")
        return "-" if v is None else f"{v:,.0f} ms" if v >= 100 else f"{v:.1f} ms"

    for t in tried:
        f = t.figures or {}
        out = f.get("outputThroughput")
        table.add_row(t.label + (" *" if t.note else ""),
                      "-" if t.goodput is None else figure(t.goodput), p90(f, "ttftMs"),
                      p90(f, "tpotMs"), "-" if out is None else f"{out:,.0f}")
    console.print(table)
    for note in sorted({t.note for t in tried if t.note}):
        console.print(f"* {note}")
    own = next((t for t in tried if t.label == "as the spec"), None)
    best = tried[0] if tried else None
    if best is None or own is None or best is own or not best.goodput or not own.goodput:
        console.print("recommended: the spec's own settings")
        return
    gain = best.goodput / own.goodput - 1
    console.print(f"recommended: {best.label} ({figure(best.goodput)} requests/s in SLO, "
                  f"{gain:+.0%} over the spec's settings{'; ' + best.note if best.note else ''})")


def show_cpu(plan: Any, kv_space_gib: float | None) -> None:
    """`pdctl plan` for an `engine.device: cpu` spec: GPU capacity planning does not apply (no
    GPU memory, no GPU roofline, no GPU to assume); what the model alone says is printed: its
    weights, KV per token and per max-length sequence, and what `VLLM_CPU_KVCACHE_SPACE`
    holds (docs/capacity.md, "CPU engines")."""
    console = make_console(piped_width=132)
    model = plan.model
    source = "built-in table" if model.from_table else "model.config"
    console.print(
        f"[bold]{model.name}[/]: {_params(model.params)} ({source}); "
        f"engine.device [bold]cpu[/]: GPU capacity planning does not apply (no GPU memory, "
        "no GPU speed model); the model's own figures, per instance:")
    table = Table(box=box.SIMPLE_HEAD, show_edge=False)
    table.add_column("", no_wrap=True)
    for r in plan.roles:
        table.add_column(f"{r.role} x{r.replicas}", justify="right")
    rows: list[tuple[str, list[str]]] = [
        ("weights (RAM)", [_gib(r.memory.weights * r.shape.tp * r.shape.pp) for r in plan.roles]),
        ("KV / token", [_bytes(r.memory.kv_per_token_all_layers) for r in plan.roles]),
        (f"KV / {plan.roles[0].memory.max_model_len:,}-token seq.",
         [_gib(r.memory.kv_per_sequence) for r in plan.roles])]
    if kv_space_gib is not None:
        rows.append(("VLLM_CPU_KVCACHE_SPACE", [f"{kv_space_gib:g} GiB" for _ in plan.roles]))
        rows.append(("KV tokens it holds",
                     [f"{int(kv_space_gib * GIB // max(1, r.memory.kv_per_token_all_layers)):,}"
                      for r in plan.roles]))
    for label, values in rows:
        table.add_row(label, *values)
    console.print(table)
    if kv_space_gib is None:
        console.print(
            "KV cache: vLLM's CPU default (set VLLM_CPU_KVCACHE_SPACE, in GiB, in engine.env to "
            "size it; the host needs the weights + that much RAM per instance)")
    else:
        console.print(
            "the host needs the weights + VLLM_CPU_KVCACHE_SPACE of RAM per instance; speed "
            "on a CPU: measure it with `pdctl bench`")


def _params(params: float) -> str:
    """The parameter count, or that it is unknown (never "0.00B params")."""
    return f"{params / 1e9:.2f}B params" if params >= 5e6 else (
        f"{params / 1e6:.1f}M params" if params > 0 else "parameter count unknown")
