"""`pdctl render`: print the artifacts (a YAML stream or scripts), or write them to a folder."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import typer

from pdctl.cli.options import PHASE, SPEC, TARGET

MARKER = ".pdctl-bundle"


def check_output(output: Path, name: str) -> None:
    """Refuse to write over anything but an empty folder or this deployment's own bundle."""
    from pdctl.errors import UsageError

    if not output.exists():
        return
    if not output.is_dir():
        raise UsageError(f"--output {output} is a file, not a folder", fix="choose a folder")
    try:
        marker = output / MARKER
        if marker.is_file():
            owner = marker.read_text(encoding="utf-8").strip()
            if owner != name:
                raise UsageError(
                    f"--output {output} holds the bundle of deployment {owner!r}, not {name!r}",
                    fix="choose another folder, or remove that one first",
                )
            return
        if any(output.iterdir()):
            raise UsageError(
                f"--output {output} exists and is not a pdctl bundle folder",
                fix="choose an empty or new folder",
            )
    except OSError as exc:
        from pdctl.errors import PdctlError

        raise PdctlError(f"cannot read {output}: {exc.strerror}") from None


def write_bundle(bundle, out: Path) -> None:
    """Write every artifact under `out` atomically: all files appear, or none change."""
    from pdctl.errors import PdctlError

    out = Path(os.path.abspath(out))
    tmp: Path | None = None
    old: Path | None = None
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".pdctl-render-", dir=out.parent))
        for artifact in bundle:
            path = tmp / artifact.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(artifact.text, encoding="utf-8")
            os.chmod(path, 0o755 if artifact.executable else 0o644)
        os.chmod(tmp, 0o755)
        if out.exists():
            # Swap the old bundle out first, so a failure leaves the old one in place.
            old = Path(tempfile.mkdtemp(prefix=".pdctl-old-", dir=out.parent))
            out.rename(old / "bundle")
        tmp.rename(out)
        tmp = None
    except OSError as exc:
        if old is not None and not out.exists():
            (old / "bundle").rename(out)
        raise PdctlError(f"cannot write {out}: {exc.strerror or exc}") from None
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp)
        if old is not None and old.exists():
            shutil.rmtree(old)


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
        if output is None:
            sys.stdout.write(bundle.stream())
            return
        check_output(output, plan.name)
        from pdctl.render.bundle import Artifact, Bundle

        marker = Artifact(MARKER, f"{plan.name}\n")
        write_bundle(Bundle(bundle.kind, (*bundle.artifacts, marker)), output)
        typer.echo(f"wrote {len(bundle.artifacts)} files to {output}", err=True)
