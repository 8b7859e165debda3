"""`pdctl bench`: load the running deployment with the spec's workload, beside what `pdctl
plan` predicted; the P/D canary; `--compare` two saved runs (docs/bench.md)."""

from __future__ import annotations

import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any

import typer

from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.specfile import with_overlays


def spec_hash(spec: Any) -> str:
    """A digest of the merged spec (overlays applied), as pdctl validated it."""
    data = spec.model_dump(mode="json", by_alias=True)
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def predictions(spec_file: str, w: Any) -> tuple[dict[str, Any] | None, str, Any]:
    """`pdctl plan`'s figures for the bench's workload and the plan itself (what `plan --load`
    simulates each step on), or None and why."""
    from pdctl.capacity.report_json import plan_dict
    from pdctl.cli.specfile import read_spec
    from pdctl.errors import PdctlError
    from pdctl.inputs import capacity_plan

    if spec_file == "-":  # stdin was read once, for the deployment
        return None, "none (SPEC came from stdin; give a file to compare with `pdctl plan`)", None
    try:
        spec, source = read_spec(spec_file)
        result, origin = capacity_plan(
            spec, source, spec_file, None, None, w.prompt_tokens, w.output_tokens, None,
            w.ttft_ms, w.tpot_ms
        )
    except PdctlError as exc:
        return None, exc.line(), None
    from pdctl.bench.report import capacity

    doc = plan_dict(result)
    if not result.fits:
        return capacity(doc), f"{doc['gpu']['name']} ({origin})", None
    from pdctl.capacity.steptime import calibration_for

    basis = calibration_for(result.gpu, result.roles[-1].shape.engine).basis
    return capacity(doc), f"{doc['gpu']['name']} ({origin}); speed {basis}", result


def read_report(path: str) -> dict[str, Any]:
    from pdctl.bench.report import check_report
    from pdctl.errors import UsageError
    from pdctl.inputs import read_bounded

    try:
        doc = json.loads(read_bounded(Path(path), 64 << 20, path))
    except ValueError as exc:
        raise UsageError(
            f"{path}: not JSON ({exc})", fix="pass a file `pdctl bench` saved"
        ) from None
    return check_report(doc, path)


def register(app: typer.Typer) -> None:
    @app.command("bench")
    @with_overlays
    @connection(docker=False)
    def bench(
        conn: ConnectFlags,
        spec: str | None = typer.Argument(None, help="Spec file, or - for stdin."),
        output: str = typer.Option("table", "--output", "-o", metavar="FORMAT",
                                   help="table or json."),
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
        timeout: int = typer.Option(1800, "--timeout", min=1,
                                    help="Seconds one step may take."),
        compare: tuple[str, str] | None = typer.Option(
            None, "--compare", metavar="A.json B.json",
            help="Compare two saved reports (B over A) instead of running one."),
        allow_flag_diff: bool = typer.Option(
            False, "--allow-flag-diff",
            help="With --compare: compare runs whose engine flags or versions differ."),
    ) -> None:
        """Load SPEC's running deployment with its workload (`vllm bench serve` on a
        deployment host) and report TTFT/TPOT/ITL, throughput and goodput beside what `pdctl
        plan` predicted, with what each role's /metrics saw; run the P/D canary (phases 2, 3).
        Exit 1 when a request failed or the canary failed."""
        from pdctl.errors import PdctlError, UsageError

        if output not in ("table", "json"):
            raise UsageError(f"--output must be table or json (got {output!r})")
        if compare is not None:
            from pdctl.bench.report import compare as compare_reports

            doc = compare_reports(read_report(compare[0]), read_report(compare[1]),
                                  allow_flag_diff)
            _show_compare(doc, output)
            return
        if spec is None:
            raise UsageError("missing SPEC", fix="pdctl bench SPEC, or --compare A.json B.json")
        report = run(spec, conn, instance, timeout, not no_canary, canary_only, token_ids)
        if save is not None:
            try:
                save.write_text(json.dumps(report, indent=2) + "\n")
            except OSError as exc:
                raise UsageError(f"--save {save}: {exc.strerror}") from None
        if output == "json":
            typer.echo(json.dumps(report, indent=2))
        else:
            from pdctl.cli.bench_show import show

            show(report)
        problems = _problems(report)
        if problems:
            raise PdctlError("; ".join(problems))


def _problems(report: dict[str, Any]) -> list[str]:
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


def run(spec_file: str, conn: ConnectFlags, instance: str | None, timeout: float,
        with_canary: bool, canary_only: bool, token_ids: bool = False) -> dict[str, Any]:
    """Plan, connect, run the canary and the steps; the report."""
    from pdctl import __version__
    from pdctl.bench import canary, load, report
    from pdctl.bench.remote import Bench
    from pdctl.cli.specfile import load as load_spec
    from pdctl.compat import ROUTER_VERSION
    from pdctl.errors import UsageError

    plan, bundle = load_spec(spec_file, None, None)
    spec = plan.spec
    w = load.workload_of(spec)
    b = spec.bench
    pd = plan.phase in (2, 3)
    if canary_only and not pd:
        raise UsageError("--canary-only: the canary checks the P/D path (phases 2 and 3)")
    cap, plan_basis, planned = predictions(spec_file, w)
    session = Bench(plan, bundle, conn.ssh(), instance).open()
    try:
        doc: dict[str, Any] = {
            "kind": report.KIND, "version": report.VERSION, "pdctl": __version__,
            "name": plan.name, "phase": plan.phase, "specHash": spec_hash(spec),
            "createdAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "endpoint": session.base_url(session.driver()),
            "hosts": [{"name": h.name, "address": h.address} for h in plan.hosts_used()],
            "engines": session.engines(),
            "router": {"version": ROUTER_VERSION} if any(
                u.role == "router" for u in plan.units) else None,
            "workload": {"promptTokens": w.prompt_tokens, "outputTokens": w.output_tokens,
                         "rangeRatio": w.range_ratio, "seed": w.seed,
                         "ttftMs": w.ttft_ms, "tpotMs": w.tpot_ms},
            "plan": {"basis": plan_basis, "capacity": cap},
            "canary": None, "steps": [],
        }
        n_prompts = b.canary_prompts if b is not None else 4
        tokens = b.canary_tokens if b is not None else 16
        if pd and with_canary and n_prompts:
            verdict = session.canary(n_prompts, tokens, w.seed, min(timeout, 300), token_ids)
            doc["canary"] = canary.as_dict(verdict)
        if canary_only:
            return doc
        for step in load.steps(b.request_rate if b else (), b.concurrency if b else ()):
            row = session.step(w, step, timeout)
            if planned is not None:  # `pdctl plan --load` of this very step's load
                from pdctl.capacity.atload import predict_step

                offered = step.rate if step.rate is not None and math.isfinite(step.rate) else None
                pred = predict_step(planned, load.requests_of(w, step), step.concurrency,
                                    offered)
                row["predicted"] = pred
                row["ratio"] = report.ratios(report.measured_for_ratio(row["measured"]), pred)
            doc["steps"].append(row)
        return doc
    finally:
        session.close()


VERIFY_PROMPTS, VERIFY_TOKENS, VERIFY_TIMEOUT = 2, 8, 120.0


def check_verify(plan: Any, option: str = "--verify") -> None:
    """`up --verify` (`status --verify`, `top --canary`) is for a P/D deployment on hosts:
    refused before anything starts."""
    from pdctl.errors import UsageError

    if plan.phase not in (2, 3) or plan.target != "hosts":
        raise UsageError(
            f"{option} runs the P/D canary: phases 2 and 3 on SSH hosts "
            f"({plan.name} is phase {plan.phase} on {plan.target})",
            fix=f"leave out {option}",
        )


def quick_canary(plan: Any, bundle: Any, conn: ConnectFlags) -> Any:
    """The quick canary (`up --verify`, `status --verify`, `top --canary`): a few greedy
    prompts through the router and through the first prefill engine alone, with the engines'
    logs and connector counters read around them; its bench.canary.Verdict."""
    from pdctl.bench.remote import Bench

    seed = plan.spec.bench.seed if plan.spec.bench is not None else 0
    session = Bench(plan, bundle, conn.ssh()).open()
    try:
        return session.canary(VERIFY_PROMPTS, VERIFY_TOKENS, seed, VERIFY_TIMEOUT)
    finally:
        session.close()


def verify(plan: Any, bundle: Any, conn: ConnectFlags, console: Any) -> None:
    """The quick canary after `up`; PdctlError naming the prefill -> decode pair when it
    fails (its tokens differ, or an engine logged a suspect KV event)."""
    from pdctl.errors import PdctlError

    v = quick_canary(plan, bundle, conn)
    from pdctl.bench.canary import failed_who, passed_line

    if not v.ok:
        raise PdctlError(f"verify: the P/D canary failed ({failed_who(v)}): "
                         + "; ".join(v.lines[:3]))
    console.print("verified: " + passed_line(v), highlight=False, markup=False)


def _show_compare(doc: dict[str, Any], output: str) -> None:
    if output == "json":
        typer.echo(json.dumps(doc, indent=2))
        return
    from rich.table import Table

    from pdctl.cli import term
    from pdctl.cli.bench_show import num

    console = term.console()
    for line in doc["flagDifferences"]:
        console.print(f"[yellow]engines differ[/]: {line}", highlight=False)
    table = Table(title=f"B ({doc['b']['specHash']}) over A ({doc['a']['specHash']})")
    for col in ("load", "figure", "A", "B", "B/A"):
        table.add_column(col)
    for r in doc["rows"]:
        table.add_row(r["load"], r["figure"], num(r["a"]), num(r["b"]), num(r["bOverA"]))
    console.print(table)
