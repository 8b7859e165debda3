"""`pdctl up`: render, show what will change where, confirm, apply, wait until healthy."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import typer

from pdctl.cli.connect import KUBE, SSH, ConnectFlags, connection
from pdctl.cli.options import PHASE, SPEC, TARGET

if TYPE_CHECKING:
    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle
    from pdctl.targets.ssh import SshOptions

# The names `pdctl top` (top_cmd.py) imports; the options themselves live in connect.py.
KNOWN_HOSTS, ACCEPT_NEW, IDENTITY = (
    SSH[k][1] for k in ("known_hosts", "accept_new_host_keys", "identity")
)
KUBECONFIG, CONTEXT = KUBE["kubeconfig"][1], KUBE["context"][1]
__all__ = [
    "ACCEPT_NEW",
    "CONTEXT",
    "IDENTITY",
    "KNOWN_HOSTS",
    "KUBECONFIG",
    "kube_api",
    "load",
    "ssh_options",
]


def load(spec: str, phase: int | None, target: str | None) -> tuple[Plan, Bundle]:
    from pdctl.cli import specfile

    return specfile.load(spec, phase, target)


def ssh_options(known_hosts: str | None, accept_new: bool, identity: str | None) -> SshOptions:
    return ConnectFlags(known_hosts, accept_new, identity).ssh()


def kube_api(kubeconfig: str | None, context: str | None) -> object:
    from pdctl.targets.kube import api_client

    return api_client(kubeconfig, context)


def read_secrets(plan: Plan) -> dict[str, str]:
    """Secret values from the local environment (the only place they come from)."""
    from pdctl.errors import PdctlError

    values = {}
    for secret in plan.secrets:
        value = os.environ.get(secret.source)
        if value is None:
            raise PdctlError(
                f"secret {secret.name}: environment variable {secret.source} is not set; "
                f"export it before `pdctl up`"
            )
        values[secret.name] = value
    return values


def register(app: typer.Typer) -> None:
    @app.command("up")
    @connection()
    def up(
        conn: ConnectFlags,
        spec: str = SPEC,
        yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
        dry_run: bool = typer.Option(
            False,
            "--dry-run",
            help="Connect, show what would change, and stop (helm's --dry-run=server).",
        ),
        offline: bool = typer.Option(
            False,
            "--offline",
            help="With --dry-run: do not connect; list what the spec would "
            "start, without comparing with what runs there (helm's --dry-run=client).",
        ),
        keep_going: bool = typer.Option(
            False,
            "--keep-going",
            help="On a failure, undo only the failed instances (stop a "
            "new one, bring back the previous version of a replaced one) and go on with the "
            "rest; still exit 1. Without it a failure undoes the whole run.",
        ),
        timeout: int = typer.Option(
            900, "--timeout", help="Seconds each stage may take to become healthy."
        ),
        phase: int | None = PHASE,
        target: str | None = TARGET,
    ) -> None:
        """Start SPEC's deployment (or bring it in line with SPEC) and wait until healthy."""
        from rich.console import Console

        from pdctl import actions
        from pdctl.cli.progress import ConsoleProgress, report_failures, report_undo
        from pdctl.errors import PdctlError, UsageError

        if offline and not dry_run:
            raise UsageError("--offline works only with --dry-run", fix="add --dry-run")
        mode: actions.DryRun = "client" if offline else "server" if dry_run else "none"
        console = Console(highlight=False, log_path=False)
        plan, bundle = load(spec, phase, target)
        options = conn.target(dry_run=dry_run)
        try:
            done = actions.up(
                plan,
                bundle,
                options,
                ConsoleProgress(console),
                lambda: read_secrets(plan),
                mode,
                yes,
                timeout,
                keep_going,
            )
        except actions.UpFailed as exc:
            report_failures(console, exc.failures)
            report_undo(console, exc.outcome)
            raise PdctlError(f"up failed: {exc.line()}") from None
        if not done.applied:
            return
        failures = done.outcome.failures
        if failures:
            report_failures(console, failures)
            report_undo(console, done.outcome)
        if done.kind == "kubernetes":
            console.print("[bold]applied.[/]")
        else:
            console.print("[bold]ready.[/] send requests to:")
            for url in done.endpoints:
                console.print(f"  {url}  (model {plan.served_name})")
        if failures:
            names = ", ".join(f.unit for f in failures)
            raise PdctlError(
                f"up failed for {names} (--keep-going went on with the others); "
                f"{done.outcome.summary()}"
            )
