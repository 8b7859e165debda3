"""`pdctl render`: print the artifacts (a YAML stream or scripts), or write them to a folder."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import typer

from pdctl.cli.options import PHASE, SPEC, TARGET


def write_bundle(bundle, out: Path) -> None:
    """Write every artifact under `out` atomically: all files appear, or none change."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".pdctl-render-", dir=out.parent))
    try:
        for artifact in bundle:
            path = tmp / artifact.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(artifact.text, encoding="utf-8")
            os.chmod(path, 0o755 if artifact.executable else 0o644)
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


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
            None, "--facts", help="A preflight recording (pdctl preflight --record DIR): "
            "place tensor-parallel groups and prefill/decode pairs by GPU topology."
        ),
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
            from pdctl.cli.specfile import read_spec
            from pdctl.facts import facts_from
            from pdctl.plan.topology import chooser
            from pdctl.probe.record import read

            names = tuple(h.name for h in read_spec(spec)[0].hosts)
            plan, source = plan_from(
                spec, phase, target, choose=chooser(facts_from(read(facts, names)))
            )
        try:
            bundle = render_plan(plan)
        except SpecError as exc:
            raise source.locate(exc) from None
        if output is None:
            sys.stdout.write(bundle.stream())
            return
        if output.exists() and not (output / ".pdctl-bundle").exists() and any(output.iterdir()):
            raise SpecError(
                f"{output} exists and is not a pdctl bundle folder",
                fix="choose an empty or new folder",
            )
        from pdctl.render.bundle import Artifact, Bundle

        marker = Artifact(".pdctl-bundle", f"{plan.name}\n")
        write_bundle(Bundle(bundle.kind, (*bundle.artifacts, marker)), output)
        typer.echo(f"wrote {len(bundle.artifacts)} files to {output}", err=True)
