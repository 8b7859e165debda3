"""`pdctl down`: stop and remove exactly what `pdctl up` started; twice is harmless."""

from __future__ import annotations

import typer

from pdctl import actions
from pdctl.cli import term
from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.down_preview import confirm_down, held_size
from pdctl.cli.options import DEPLOYED_PHASE, SPEC, TARGET
from pdctl.cli.progress import ConsoleProgress
from pdctl.cli.specfile import load, with_overlays
from pdctl.errors import PdctlError, UsageError


@with_overlays
@connection()
def down(
    conn: ConnectFlags, spec: str = SPEC, phase: int | None = DEPLOYED_PHASE,
    target: str | None = TARGET,
    delete_volumes: bool = typer.Option(
        False, "--delete-volumes",
        help="Kubernetes: delete the deployment's PersistentVolumeClaims too (the model "
        "cache: weights are downloaded again on the next `up`). Kept by default."),
    delete_bundle: bool = typer.Option(
        False, "--delete-bundle",
        help="SSH hosts: remove the files `up --bundle` copied too (<dataDir>/.pdctl-bundles/"
        "<name>: wheels and weights; the next `up --bundle` copies them again). Kept by "
        "default."),
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
    reading = conn.target(dry_run=True)
    kind = actions.kind_of(plan, reading)
    # what `down` keeps unless told: Kubernetes' volumes, the hosts' bundle files
    delete = kept_by_default(kind, delete_volumes, delete_bundle)
    if dry_run:
        from pdctl.cli.down_preview import preview

        for line in preview(plan, bundle, reading, delete).lines():
            console.print(line, soft_wrap=True)
        return

    options = conn.target()
    confirm_down(plan, actions.capabilities_of(plan, options), yes)
    progress = ConsoleProgress(console)
    # --timeout: where the target waits for its instances to go (Kubernetes: the pods)
    done = actions.down(plan, bundle, options, progress, delete, float(timeout))
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
    for host, (folder, state) in done.bundles.items():
        console.print(bundle_line(host, folder, state), soft_wrap=True)
    if not done.unreachable:
        return
    left = []
    for host, why in done.unreachable.items():
        units = ", ".join(done.left.get(host, [])) or "-"
        console.print(f"[red]NOT stopped[/] on {host}: {units} ({why})", soft_wrap=True)
        left.append(f"{host} ({units})")
    raise PdctlError(f"down could not reach {'; '.join(left)}: these may still be running; "
                     "run `pdctl down` again when the host answers")


def kept_by_default(kind: str, delete_volumes: bool, delete_bundle: bool) -> bool:
    """Whether `down` removes what it keeps by default, from the switch this target knows:
    --delete-volumes on Kubernetes, --delete-bundle on SSH hosts; UsageError for the other."""
    if delete_bundle and kind != "hosts":
        raise UsageError("--delete-bundle: only SSH hosts keep the files `up --bundle` copied",
                         fix="leave it out" + ("; --delete-volumes deletes the model cache"
                                               if kind == "kubernetes" else ""))
    if delete_volumes and kind == "hosts":
        raise UsageError("--delete-volumes: SSH hosts have no volumes",
                         fix="--delete-bundle removes the files `up --bundle` copied there")
    return delete_bundle if kind == "hosts" else delete_volumes


def bundle_line(host: str, folder: str, state: str) -> str:
    """What became of a host's bundle folder (targets.base.Stopped.bundles)."""
    if state == "removed":
        return f"removed the bundle's files {folder} on {host}"
    if state.startswith("failed"):
        return f"[red]could not remove[/] the bundle's files {folder} on {host}: {state[7:]}"
    return (f"kept the files `up --bundle` copied, {folder} on {host} ({held_size(state)}); "
            "--delete-bundle removes them")
