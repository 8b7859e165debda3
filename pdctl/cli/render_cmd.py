"""`pdctl render`: print the artifacts (a YAML stream or scripts), or write them to a folder."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from pdctl.cli.options import PHASE, SPEC, TARGET


def register(app: typer.Typer) -> None:
    @app.command("render")
    def render(
        spec: str = SPEC,
        output: Path | None = typer.Option(
            None, "--output", "-o", help="Write the bundle as files under this folder."
        ),
        phase: int | None = PHASE,
        target: str | None = TARGET,
        facts: Path | None = typer.Option(
            None,
            "--facts",
            help="A preflight recording (pdctl preflight --record DIR): "
            "place tensor-parallel groups and prefill/decode pairs by GPU topology.",
        ),
        strict: bool = typer.Option(
            False, "--strict", help="Refuse (exit 1) a spec with a role that does not fit on "
            "its GPU (hardware.gpu), instead of warning."),
    ) -> None:
        """Render SPEC: Kubernetes YAML for `kubectl apply -f -`, or per-host launch scripts."""
        from pdctl.cli.options import check_phase_target
        from pdctl.cli.specfile import plan_from
        from pdctl.errors import SpecError
        from pdctl.render import render as render_plan

        check_phase_target(phase, target)
        if facts is None:
            plan, source = plan_from(spec, phase, target)
        else:
            from pdctl.cli.specfile import plan_spec, read_spec
            from pdctl.facts import facts_from
            from pdctl.plan.topology import chooser
            from pdctl.probe.record import read

            # Read SPEC once: `-` (stdin) cannot be read twice.
            loaded, source = read_spec(spec)
            names = tuple(h.name for h in loaded.hosts)
            choose = chooser(facts_from(read(facts, names)))
            plan = plan_spec(loaded, source, phase, target, choose=choose)
        try:
            bundle = render_plan(plan)
        except SpecError as exc:
            raise source.locate(exc) from None
        _warn(spec, plan, strict)
        if output is None:
            sys.stdout.write(bundle.stream())
            return
        from pdctl.cli.bundle_folder import write

        say = lambda msg: typer.echo(msg, err=True)  # noqa: E731
        done = write(bundle, plan.name, output, say)
        gone = f", removed {done.removed} it no longer writes" if done.removed else ""
        say(f"wrote {done.files} files to {output}{gone}")
        if done.kept_unlisted:
            say(
                f"kept {done.kept_unlisted} other files in {output}: the bundle there came from "
                "an older pdctl that kept no list of its files; remove the ones you do not need"
            )


def _warn(spec_file: str, plan: object, strict: bool) -> None:
    """The plan's notes and capacity warnings on stderr, as `validate` prints them; --strict
    refuses a role that does not fit before anything is written."""
    from pdctl.cli.plan_cmd import capacity_warnings

    for note in plan.notes:  # type: ignore[attr-defined]
        typer.echo(f"{spec_file}: warning: {note}", err=True)
    warnings = capacity_warnings(plan.spec, spec_file)  # type: ignore[attr-defined]
    for line in warnings:
        typer.echo(line, err=True)
    if warnings and strict:
        typer.echo(f"{spec_file}: refused (--strict): a role does not fit on its GPU", err=True)
        raise typer.Exit(1)
