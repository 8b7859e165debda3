"""`pdctl down`: stop and remove exactly what `pdctl up` started; twice is harmless."""

from __future__ import annotations

import typer

from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.options import PHASE, SPEC, TARGET


def register(app: typer.Typer) -> None:
    @app.command("down")
    @connection()
    def down(
        conn: ConnectFlags,
        spec: str = SPEC,
        phase: int | None = PHASE,
        target: str | None = TARGET,
        delete_volumes: bool = typer.Option(
            False,
            "--delete-volumes",
            help="Kubernetes: delete the deployment's PersistentVolumeClaims too (the model "
            "cache: weights are downloaded again on the next `up`). Kept by default.",
        ),
    ) -> None:
        """Stop SPEC's processes, containers or Kubernetes objects and remove their files."""
        from rich.console import Console

        from pdctl import actions
        from pdctl.cli.progress import ConsoleProgress
        from pdctl.cli.specfile import load
        from pdctl.errors import PdctlError

        console = Console(highlight=False, log_path=False)
        plan, bundle = load(spec, phase, target)
        options = conn.target()
        done = actions.down(plan, bundle, options, ConsoleProgress(console), delete_volumes)
        kind = actions.kind_of(plan, options)
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
        if not done.unreachable:
            if not done.removed:
                console.print("nothing was running")
            console.print(f"removed the deployment folder of {plan.name!r} on every host")
            return
        reached = sorted({h.name for h in plan.spec.hosts} - set(done.unreachable))
        if reached:
            console.print(f"removed the deployment folder of {plan.name!r} on {', '.join(reached)}")
        left = []
        for host, why in done.unreachable.items():
            units = ", ".join(done.left.get(host, [])) or "-"
            console.print(f"[red]NOT stopped[/] on {host}: {units} ({why})", soft_wrap=True)
            left.append(f"{host} ({units})")
        raise PdctlError(
            f"down could not reach {'; '.join(left)}: these may still be running; "
            "run `pdctl down` again when the host answers"
        )
