"""`pdctl down`: stop and remove exactly what `pdctl up` started; twice is harmless."""

from __future__ import annotations

import typer

from pdctl import actions
from pdctl.cli import term
from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.down_preview import confirm_down
from pdctl.cli.options import DEPLOYED_PHASE, SPEC, TARGET
from pdctl.cli.progress import ConsoleProgress
from pdctl.cli.specfile import load, with_overlays
from pdctl.errors import PdctlError


@with_overlays
@connection()
def down(
    conn: ConnectFlags, spec: str = SPEC, phase: int | None = DEPLOYED_PHASE,
    target: str | None = TARGET,
    delete_volumes: bool = typer.Option(
        False, "--delete-volumes", "--delete-bundle",
        help="Delete the model's files too, which `down` keeps by default: on Kubernetes the "
        "deployment's PersistentVolumeClaims (the model cache: weights are downloaded again "
        "on the next `up`); on SSH hosts the files `up --bundle` copied "
        "(<dataDir>/.bundle/<name>: wheels and weights, copied again by the next "
        "`up --bundle`)."),
    dry_run: bool = typer.Option(
        False, "--dry-run",
        help="Connect and list what would be stopped or deleted; touch nothing."),
    yes: bool = typer.Option(
        False, "--yes", "-y", help="Kubernetes: delete without asking for confirmation."),
    timeout: int = typer.Option(
        300, "--timeout", min=1,
        help="Kubernetes: seconds to wait, after deleting, until the deployment's pods are "
        "gone (their GPUs free); pods still there then are named, exit 1."),
) -> None:
    """Stop SPEC's processes, containers or Kubernetes objects and remove their files."""
    console = term.console(log_path=False)
    plan, bundle = load(spec, phase, target)
    if dry_run:
        from pdctl.cli.down_preview import preview

        for line in preview(plan, bundle, conn.target(dry_run=True), delete_volumes).lines():
            console.print(line, soft_wrap=True)
        return

    options = conn.target()
    confirm_down(plan, actions.capabilities_of(plan, options), yes)
    kind = actions.kind_of(plan, options)
    progress = ConsoleProgress(console)
    # --timeout: where the target waits for its instances to go (Kubernetes: the pods)
    done = actions.down(plan, bundle, options, progress, delete_volumes, float(timeout))
    if kind == "kubernetes":
        gone = done.removed
        console.print(f"deleted {len(gone)} objects" if gone else "nothing to delete")
        for what, name in done.kept:
            console.print(f"kept {what} {name}; --delete-volumes removes it")
        return
    if kind == "docker":
        for host, name in done.removed:
            console.print(f"removed container {name} on {host}")
        console.print("nothing was running" if not done.removed else "done")
        return
    for host, unit in done.removed:
        console.print(f"stopped {unit} on {host}")
    if not done.removed:
        console.print("nothing was running" + (" there" if done.unreachable else ""))
    removed = sorted(h for h, what in done.folders.items() if what == "removed")
    if removed and len(removed) == len(plan.spec.hosts):
        console.print(f"removed the deployment folder of {plan.name!r} on every host")
    elif removed:
        console.print(f"removed the deployment folder of {plan.name!r} on {', '.join(removed)}")
    for host, (folder, kib) in done.bundles.items():
        console.print(f"removed the bundle's files {folder} on {host}" if kib < 0 else
                      f"kept the files `up --bundle` copied, {folder} on {host} "
                      f"({kib * 1024 / 1e6:.1f} MB); --delete-bundle removes them",
                      soft_wrap=True)
    if not done.unreachable:
        return
    left = []
    for host, why in done.unreachable.items():
        units = ", ".join(done.left.get(host, [])) or "-"
        console.print(f"[red]NOT stopped[/] on {host}: {units} ({why})", soft_wrap=True)
        left.append(f"{host} ({units})")
    raise PdctlError(f"down could not reach {'; '.join(left)}: these may still be running; "
                     "run `pdctl down` again when the host answers")
