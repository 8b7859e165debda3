"""`pdctl bench`: load the running deployment with the spec's workload, beside what `pdctl
plan` predicted; the P/D canary; `--compare` two saved runs (docs/bench.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.table import Table

from pdctl.bench.report import problems
from pdctl.bench.run import no_gpu_plan, predictions, run
from pdctl.cli import term
from pdctl.cli.bench_show import num
from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.options import check_output, output_option
from pdctl.cli.specfile import load, read_spec, with_overlays
from pdctl.errors import PdctlError, UsageError
from pdctl.inputs import capacity_plan

if TYPE_CHECKING:
    from pdctl.bench.load import Workload
    from pdctl.bench.run import Predictions


def _predictions(spec_file: str, w: Workload) -> Predictions:
    """`pdctl plan`'s figures for the bench's workload and the plan itself (what `plan --load`
    simulates each step on), or None and why."""
    if spec_file == "-":  # stdin was read once, for the deployment
        return None, "none (SPEC came from stdin; give a file to compare with `pdctl plan`)", None
    try:
        spec, source = read_spec(spec_file)
        if spec.engine.device == "cpu":  # GPU capacity planning does not apply
            return no_gpu_plan()
        result, origin = capacity_plan(
            spec, source, spec_file, None, None, w.prompt_tokens, w.output_tokens, None,
            w.ttft_ms, w.tpot_ms)
    except PdctlError as exc:
        return None, exc.line(), None
    return predictions(result, origin)


@with_overlays
@connection(docker=False)
def bench(
    conn: ConnectFlags,
    spec: str | None = typer.Argument(None, help="Spec file, or - for stdin."),
    output: str = output_option(),
    save: Path | None = typer.Option(None, "--save", metavar="FILE",
                                     help="Write the report (JSON) to FILE."),
    no_canary: bool = typer.Option(False, "--no-canary", help="Skip the P/D canary."),
    canary_only: bool = typer.Option(False, "--canary-only",
                                     help="Run the P/D canary only, no load."),
    token_ids: bool = typer.Option(
        False, "--canary-token-ids",
        help="The canary compares token ids (logprobs) instead of the completions' text."),
    instance: str | None = typer.Option(None, "--instance", metavar="UNIT",
                                        help="Send the load to this unit (default: the "
                                        "router, else the one serve engine)."),
    timeout: int = typer.Option(1800, "--timeout", min=1, help="Seconds one step may take."),
    compare: tuple[str, str] | None = typer.Option(
        None, "--compare", metavar="A.json B.json",
        help="Compare two saved reports (B over A) instead of running one."),
    allow_flag_diff: bool = typer.Option(
        False, "--allow-flag-diff",
        help="With --compare: compare runs whose engine flags or versions differ."),
    report_file: Path | None = typer.Option(
        None, "--report", metavar="FILE.html",
        help="Also write a self-contained HTML report with charts (with --compare: both "
        "runs on the same axes)."),
) -> None:
    """Load SPEC's running deployment with its workload (`vllm bench serve` on a
    deployment host) and report TTFT/TPOT/ITL, throughput and goodput beside what `pdctl
    plan` predicted, with what each role's /metrics saw; run the P/D canary (phases 2, 3).
    Exit 1 when a request failed or the canary failed."""
    check_output(output)
    if report_file is not None:
        from pdctl.cli.report_file import check_report_path

        check_report_path(report_file)
    if compare is not None:
        from pdctl.bench.report import compare as compare_reports
        from pdctl.inputs import read_report

        run_a, run_b = read_report(compare[0]), read_report(compare[1])
        doc = compare_reports(run_a, run_b, allow_flag_diff)
        _show_compare(doc, output)
        if report_file is not None:
            from pdctl.cli.report_file import write_report
            from pdctl.report.bench import compare_html

            write_report(report_file, compare_html(run_a, run_b, doc["flagDifferences"]))
        return
    if spec is None:
        raise UsageError("missing SPEC", fix="pdctl bench SPEC, or --compare A.json B.json")

    plan, bundle = load(spec, None, None)
    report = run(plan, bundle, conn.ssh, lambda w: _predictions(spec, w), instance,
                 timeout, not no_canary, canary_only, token_ids)
    if save is not None:
        try:
            save.write_text(json.dumps(report, indent=2) + "\n")
        except OSError as exc:
            raise UsageError(f"--save {save}: {exc.strerror}") from None
    if report_file is not None:
        from pdctl.cli.report_file import write_report
        from pdctl.report.bench import bench_html

        write_report(report_file, bench_html(report))
    if output == "json":
        typer.echo(json.dumps(report, indent=2))
    else:
        from pdctl.cli.bench_show import show

        show(report)
    failed = problems(report)
    if failed:
        raise PdctlError("; ".join(failed))


def _show_compare(doc: dict[str, Any], output: str) -> None:
    if output == "json":
        typer.echo(json.dumps(doc, indent=2))
        return
    console = term.console()
    for line in doc["flagDifferences"]:
        console.print(f"[yellow]engines differ[/]: {line}", highlight=False)
    table = Table(title=f"B ({doc['b']['specHash']}) over A ({doc['a']['specHash']})")
    for col in ("load", "figure", "A", "B", "B/A"):
        table.add_column(col)
    for r in doc["rows"]:
        table.add_row(r["load"], r["figure"], num(r["a"]), num(r["b"]), num(r["bOverA"]))
    console.print(table)
