"""`pdctl plan`: capacity planning for a spec, in closed form (no GPU needed)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

import typer

from pdctl.capacity.atload import parse_load, predict
from pdctl.capacity.fromlog import compare, parse_log
from pdctl.cli.options import FACTS, SPEC, check_output, output_option
from pdctl.cli.specfile import read_spec, with_overlays
from pdctl.errors import UsageError
from pdctl.inputs import capacity_plan


@with_overlays
def plan(
    spec: str = SPEC,
    gpu: str | None = typer.Option(
        None, "--gpu", metavar="GPU",
        # Every name of pdctl.capacity.gpus.GPUS (a test checks; not imported for --help).
        help="GPU type: H100-SXM, H100-PCIe, H200, A100-80GB, A100-40GB, "
        "L40S, L4, A10G, RTX-4090, RTX-3090, RTX-4060, T4. Default: the spec's, else H100-SXM."),
    gpu_memory_gib: float | None = typer.Option(
        None, "--gpu-memory-gib", help="GPU memory in GiB (a GPU not in the table)."),
    prompt_tokens: int | None = typer.Option(
        None, "--prompt-tokens", min=1, help="Mean prompt length (default 1024)."),
    output_tokens: int | None = typer.Option(
        None, "--output-tokens", min=1, help="Mean output length (default 256)."),
    rate: float | None = typer.Option(
        None, "--rate", min=0.0001, help="Requests per second, all instances."),
    ttft_ms: float | None = typer.Option(None, "--ttft-ms", help="TTFT target (ms)."),
    tpot_ms: float | None = typer.Option(None, "--tpot-ms", help="TPOT target (ms)."),
    output: str = output_option(
        "table (compact, fits 80 columns), wide (the table with how each figure "
        "is made) or json."),
    from_log: str | None = typer.Option(
        None, "--from-log", metavar="FILE",
        help="A vLLM start-up log: show predicted vs observed memory "
        "per term (weights, activation, CUDA graphs, KV memory, KV tokens)."),
    facts: Path | None = FACTS,
    load: list[str] = typer.Option(
        [], "--load", metavar="LOAD",
        help="Predict TTFT, TPOT, ITL, E2E, throughput and goodput under a load: "
        "concurrency=N (N clients, each sending its next request when the last ends) or "
        "rate=R (Poisson, requests/s). Repeat for several loads."),
    search: bool = typer.Option(
        False, "--search",
        help="At the first --load, plan the spec's engine settings and single changes to "
        "them (max-num-seqs, max-num-batched-tokens, gpu-memory-utilization, fp8 KV) and "
        "rank them by modelled goodput against the workload's TTFT/TPOT targets."),
    report_file: Path | None = typer.Option(
        None, "--report", metavar="FILE.html",
        help="Also write a self-contained HTML report: memory per GPU, packing advice."),
) -> None:
    """Capacity plan for SPEC: does the model fit, KV cache, memory fraction, slices, speed.

    Exit 0 when every role fits, 1 when one does not (the table says what would fit),
    2 when the spec or an option is wrong."""
    check_output(output, "table", "wide", "json")

    loads = [parse_load(x) for x in load]
    if report_file is not None:
        from pdctl.cli.report_file import check_report_path

        check_report_path(report_file)
    _finite(("--gpu-memory-gib", gpu_memory_gib), ("--rate", rate), ("--ttft-ms", ttft_ms),
            ("--tpot-ms", tpot_ms))

    spec_model, source = read_spec(spec)
    observed = _read_log(from_log) if from_log is not None else None  # before any output
    result, origin = capacity_plan(
        spec_model, source, spec, gpu, gpu_memory_gib, prompt_tokens, output_tokens, rate,
        ttft_ms, tpot_ms, facts)
    at_loads = _at_loads(result, loads)
    tried = None
    if search:
        tried = _search(spec_model, source, spec, loads, result, gpu, gpu_memory_gib,
                        prompt_tokens, output_tokens, rate, ttft_ms, tpot_ms, facts)
    if output == "json":
        from pdctl.capacity.report_json import plan_dict

        data = plan_dict(result)
        data["gpu"]["from"] = origin
        if spec_model.engine.device == "cpu":
            data["gpuCapacityPlanning"] = "does not apply: engine.device is cpu"
        if observed is not None:
            data["fromLog"] = compare(result, observed)
        if loads:
            data["loads"] = at_loads
        if tried is not None:
            from pdctl.capacity.search import ranking

            data["search"] = ranking(tried, loads[0])
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    elif spec_model.engine.device == "cpu":  # no GPU: GPU capacity planning does not apply
        from pdctl.cli.plan_table import show_cpu

        show_cpu(result, _cpu_kv_space(spec_model))
    else:
        from pdctl.cli.plan_table import show, show_comparison, show_loads

        show(result, origin, wide=output == "wide")
        if observed is not None:
            show_comparison(compare(result, observed))
        if loads:
            show_loads(at_loads)
        if tried is not None:
            from pdctl.cli.plan_table import show_search

            show_search(tried, loads[0].label)
    if report_file is not None:
        from pdctl.capacity.report_json import plan_dict as as_dict
        from pdctl.cli.report_file import write_report
        from pdctl.report.plan import plan_html

        doc = as_dict(result)
        doc["gpu"]["from"] = origin
        write_report(report_file, plan_html(doc))
    if not result.fits and spec_model.engine.device != "cpu":
        raise typer.Exit(1)


def _at_loads(result: Any, loads: list[Any]) -> list[dict[str, Any]]:
    """The predictions at each --load (none where a role does not fit)."""
    if not loads or not result.fits:
        return []

    t = result.traffic
    return [predict(result, x, t.ttft_ms, t.tpot_ms) for x in loads]


def _search(spec: Any, source: Any, spec_file: str, loads: list[Any], result: Any,
            *overrides: Any) -> list[Any]:
    """`--search`: the settings ranked at the first --load (pdctl.capacity.search)."""
    from pdctl.capacity.search import search

    if spec.engine.device == "cpu":
        raise UsageError("--search ranks GPU engine settings, and engine.device is cpu",
                         fix="measure a CPU engine's settings with `pdctl bench`")
    if not loads:
        raise UsageError("--search ranks engine settings at a load: give one",
                         fix="add --load concurrency=N or --load rate=R")
    if result.traffic.ttft_ms is None and result.traffic.tpot_ms is None:
        raise UsageError("--search ranks by goodput, which needs a latency target",
                         fix="add --ttft-ms/--tpot-ms, or set workload.ttftMs/tpotMs")
    return search(spec, lambda v: capacity_plan(v, source, spec_file, *overrides)[0], loads[0])


def _cpu_kv_space(spec: Any) -> float | None:
    """VLLM_CPU_KVCACHE_SPACE (GiB) as the spec sets it in engine.env, or None."""
    value = dict(spec.engine.env).get("VLLM_CPU_KVCACHE_SPACE")
    try:
        return float(value) if value is not None and float(value) > 0 else None
    except ValueError:
        return None


def _finite(*options: tuple[str, float | None]) -> None:
    """Refuse inf, nan and numbers not above 0 in the float options (typer takes them)."""
    for name, value in options:
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise UsageError(f"{name} must be a finite number above 0 (got {value})")


MAX_LOG_BYTES = 64 * 1024 * 1024  # a start-up log is KiBs; a whole day's log may be MiBs


def _read_log(log_file: str) -> Any:
    """Read a vLLM log (the only I/O) into its start-up figures; refused before anything is
    printed when it cannot be read or has none."""
    try:
        with Path(log_file).expanduser().open("rb") as stream:
            data = stream.read(MAX_LOG_BYTES + 1)
    except OSError as exc:
        raise UsageError(f"--from-log: cannot read {log_file}: {exc.strerror}",
                         fix="give the path of a vLLM start-up log") from None
    if len(data) > MAX_LOG_BYTES:
        raise UsageError(f"--from-log: {log_file} is larger than {MAX_LOG_BYTES >> 20} MiB",
                         fix="pass the log of `vllm serve` from its start to 'GPU KV cache size'")
    observed = parse_log(data.decode("utf-8", errors="replace"))
    if observed.empty:
        raise UsageError(f"--from-log: {log_file} has none of vLLM's start-up memory lines",
                         fix="pass the log of `vllm serve` from its start to 'GPU KV cache size'")
    return observed
