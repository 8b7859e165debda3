"""`pdctl tune SPEC --from BENCH.json`: proposed spec changes as an overlay, with evidence and
the rendered difference applying it would make. It proposes; it never applies."""

from __future__ import annotations

import difflib
import json
import tempfile
from pathlib import Path
from typing import Any

import typer

from pdctl.cli.specfile import with_overlays


def register(app: typer.Typer) -> None:
    @app.command("tune")
    @with_overlays
    def tune(
        spec: str = typer.Argument(..., help="Spec file (the one benchmarked)."),
        source: str = typer.Option(..., "--from", metavar="BENCH.json",
                                   help="A report of `pdctl bench --save` or `-o json`."),
        write: Path | None = typer.Option(
            None, "--write", "-w", metavar="FILE",
            help="Write the proposed overlay to FILE (for --overlay FILE)."),
        output: str = typer.Option("table", "--output", "-o", metavar="FORMAT",
                                   help="table or json."),
    ) -> None:
        """Propose spec changes (P:D ratio, replicas, TP, max-num-seqs,
        max-num-batched-tokens, slices per GPU) from a bench report, each with its evidence,
        as an overlay; print what the overlay would change in the rendered deployment.
        Exit 0 with or without proposals."""
        import yaml

        from pdctl.bench.tune import notes, overlay, propose
        from pdctl.cli.bench_cmd import read_report, spec_hash
        from pdctl.cli.specfile import OVERLAYS, load, read_spec
        from pdctl.errors import PdctlError, UsageError

        if output not in ("table", "json"):
            raise UsageError(f"--output must be table or json (got {output!r})")
        report = read_report(source)
        loaded, _ = read_spec(spec)
        data = loaded.model_dump(mode="json", by_alias=True, exclude_none=True)
        found = propose(data, report)
        doc = overlay(found)
        text = yaml.safe_dump(doc, sort_keys=False) if doc else ""
        diff: list[str] = []
        unplanned = None  # why SPEC with the overlay does not plan (e.g. more GPUs than hosts)
        if doc:
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "tune.yaml"
                path.write_text(text)
                _, before = load(spec, None, None)
                token = OVERLAYS.set((*OVERLAYS.get(), str(path)))
                try:
                    _, after = load(spec, None, None)
                except PdctlError as exc:
                    unplanned, after = exc.line().replace(str(path), "the overlay"), None
                finally:
                    OVERLAYS.reset(token)
            if after is not None:
                diff = list(difflib.unified_diff(
                    before.stream().splitlines(), after.stream().splitlines(),
                    "rendered", "rendered with the overlay", lineterm="", n=1))
        if write is not None and doc:
            try:
                write.write_text(text)
            except OSError as exc:
                raise UsageError(f"--write {write}: {exc.strerror}") from None
        stale = report.get("specHash") != spec_hash(loaded)
        result: dict[str, Any] = {
            "proposals": [{"path": ".".join(p.path), "from": p.was, "to": p.value,
                           "rule": p.rule, "evidence": p.evidence} for p in found],
            "overlay": doc, "notes": notes(report), "diff": diff, "doesNotPlan": unplanned,
            "specMatchesReport": not stale,
        }
        if output == "json":
            typer.echo(json.dumps(result, indent=2))
            return
        from pdctl.cli import term

        console = term.console()
        if stale:
            console.print("[yellow]note[/]: the report was measured on another spec "
                          f"(hash {report.get('specHash')}); proposals start from SPEC as it is",
                          highlight=False)
        if not found:
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
                console.print("\n".join(diff) or "(nothing rendered changes)",
                              highlight=False, markup=False)
