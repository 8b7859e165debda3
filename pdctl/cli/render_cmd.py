"""`pdctl render`: print the artifacts (a YAML or JSON stream, or scripts), or write them to a
folder (--output-dir)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from pdctl.cli.bundle_folder import write
from pdctl.cli.options import FACTS, PHASE, SPEC, STRICT, TARGET, check_phase_target
from pdctl.cli.specfile import plan_from, warn, with_overlays
from pdctl.errors import UsageError
from pdctl.inputs import render_plan


@with_overlays
def render(
    spec: str = SPEC,
    output: str = typer.Option(
        "yaml", "--output", "-o", metavar="FORMAT",
        help="yaml, or json: Kubernetes objects as one List `kubectl apply -f -` takes; "
        "host bundles as their units and files."),
    output_dir: Path | None = typer.Option(
        None, "--output-dir", metavar="DIR",
        help="Write the bundle as files under DIR (as `helm template --output-dir`), "
        "staged, then renamed into place, with a .pdctl-manifest of what pdctl wrote."),
    phase: int | None = PHASE, target: str | None = TARGET, facts: Path | None = FACTS,
    strict: bool = STRICT,
) -> None:
    """Render SPEC: Kubernetes YAML for `kubectl apply -f -`, or per-host launch scripts."""
    check_phase_target(phase, target)
    check_output(output, output_dir)
    plan, source = plan_from(spec, phase, target, facts)
    bundle = render_plan(plan, source)
    warn(spec, plan, strict, source)
    if output_dir is None:
        if output == "json":
            sys.stdout.write(json.dumps(as_json(plan, bundle), indent=2) + "\n")
        else:
            sys.stdout.write(bundle.stream())
        return

    say = lambda msg: typer.echo(msg, err=True)  # noqa: E731
    done = write(bundle, plan.name, output_dir, say)
    gone = f", removed {done.removed} it no longer writes" if done.removed else ""
    say(f"wrote {done.files} files to {output_dir}{gone}")
    if done.kept_unlisted:
        say(f"kept {done.kept_unlisted} other files in {output_dir}: the bundle there came "
            "from an older pdctl that kept no list of its files; remove the ones you do not "
            "need")


def check_output(output: str, output_dir: Path | None) -> None:
    """-o is the format; a folder given as -o (as older pdctl took it) is a usage error."""
    if output not in ("yaml", "json"):
        raise UsageError(f"-o/--output is the format, yaml or json (got {output!r}); "
                         f"--output-dir {output} writes the bundle as files")
    if output == "json" and output_dir is not None:
        raise UsageError("-o json prints to stdout; --output-dir writes files: give one of them")


def as_json(plan: Any, bundle: Any) -> dict[str, Any]:
    """The bundle as one JSON document: for Kubernetes a `v1 List` of its objects in apply
    order; for hosts every unit (where, what it runs, its files) and every file's text."""
    if bundle.kind == "kubernetes":
        return {"apiVersion": "v1", "kind": "List", "items": list(bundle.objects)}
    return {
        "name": plan.name, "kind": "hosts",
        "units": [{"name": u.unit.name, "role": u.unit.role, "host": u.unit.host.name,
                   "address": u.unit.host.address, "port": u.unit.port, "image": u.unit.image,
                   "hash": u.hash, "files": [f.path for f in u.files]}
                  for u in bundle.units],
        "files": [
            {"path": a.path, "executable": a.executable, "text": a.text} for a in bundle.artifacts]}
