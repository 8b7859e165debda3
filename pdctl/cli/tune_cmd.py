"""`pdctl tune SPEC --from BENCH.json`: proposed spec changes as an overlay, with evidence and
the rendered difference applying it would make. It proposes; it never applies."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from pdctl import inputs
from pdctl.bench.report import spec_match
from pdctl.bench.tune import tune as review
from pdctl.cli import term
from pdctl.cli.options import check_output, output_option
from pdctl.cli.specfile import spec_texts, with_overlays
from pdctl.errors import PdctlError, UsageError


@with_overlays
def tune(
    spec: str = typer.Argument(..., help="Spec file (the one benchmarked)."),
    source: str = typer.Option(..., "--from", metavar="BENCH.json",
                               help="A report of `pdctl bench --save` or `-o json`."),
    write: Path | None = typer.Option(
        None, "--write", "-w", metavar="FILE",
        help="Write the proposed overlay to FILE (for --overlay FILE)."),
    output: str = output_option(),
) -> None:
    """Propose spec changes (P:D ratio, replicas, TP, max-num-seqs,
    max-num-batched-tokens, slices per GPU, engine settings the speed model ranks first
    once scaled to the bench) from a bench report, each with its evidence, as an overlay;
    print what the overlay would change in the rendered deployment. Exit 0 with or
    without proposals."""
    check_output(output)
    report = inputs.read_report(source)
    texts = spec_texts(spec)
    loaded, spec_source = inputs.read_spec(texts)

    def rendered(overlay: str | None) -> str:  # SPEC's bundle, with the overlay if given
        merged, src = inputs.read_spec(texts + ([(overlay, "the overlay")] if overlay else []))
        return inputs.render_plan(inputs.plan_spec(merged, src), src).stream()

    data = loaded.model_dump(mode="json", by_alias=True, exclude_none=True)
    result, text = review(data, report, rendered, _ranker(loaded, spec_source, spec, report))
    doc, unplanned = result["overlay"], result["doesNotPlan"]
    if write is not None and doc:
        try:
            write.write_text(text)
        except OSError as exc:
            raise UsageError(f"--write {write}: {exc.strerror}") from None
    matches, why = spec_match(report, loaded)
    result["specMatchesReport"] = matches
    if output == "json":
        typer.echo(json.dumps(result, indent=2))
        return

    console = term.console()
    if not matches:
        console.print(f"[yellow]note[/]: {why}; proposals start from SPEC as it is",
                      highlight=False)
    if result["cpu"]:
        console.print(result["cpu"], highlight=False, markup=False)
    if not result["proposals"]:
        console.print("no change proposed: no role saturated or idled in the report")
    for p in result["proposals"]:
        console.print(f"[bold]{p['path']}[/]: {p['from']} -> {p['to']} ({p['rule']}): "
                      f"{p['evidence']}", highlight=False)
    for line in result["notes"]:
        console.print(f"plan vs measured: {line}", highlight=False)
    if doc:
        console.print("\noverlay" + (f" (written to {write})" if write else "") + ":")
        console.print(text.rstrip(), highlight=False, markup=False)
        if unplanned:
            console.print(f"\nSPEC with it does not plan yet: {unplanned}",
                          highlight=False, markup=False)
        else:
            console.print("\nwhat it changes (pdctl render):")
            console.print("\n".join(result["diff"]) or "(nothing rendered changes)",
                          highlight=False, markup=False)


def _ranker(spec: Any, source: Any, spec_file: str, report: dict[str, Any]) -> Any:
    """The speed model's ranking of SPEC's engine settings at a load, for the report's
    workload (pdctl.bench.tune.settings); None for a CPU engine (no GPU plan)."""
    if spec.engine.device == "cpu":
        return None
    from pdctl.capacity.search import search
    from pdctl.inputs import capacity_plan

    w = report.get("workload") or {}
    overrides = (None, None, w.get("promptTokens"), w.get("outputTokens"), None,
                 w.get("ttftMs"), w.get("tpotMs"))

    def rank(load: Any, ttft_scale: float, tpot_scale: float) -> list[Any]:
        try:
            return search(spec, lambda v: capacity_plan(v, source, spec_file, *overrides)[0],
                          load, (ttft_scale, tpot_scale))
        except PdctlError:  # SPEC does not plan (say, no GPU type): the rules alone
            return []

    return rank
