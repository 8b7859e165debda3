"""`pdctl up`: render, show what will change where, confirm, apply, wait until healthy.

Also holds the options and target set-up that `down`, `status` and `logs` share.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

from pdctl.cli.options import (
    DOCKER_CERT_PATH,
    DOCKER_TLS,
    INSECURE_DOCKER,
    PHASE,
    SPEC,
    TARGET,
)

KNOWN_HOSTS = typer.Option(
    None,
    "--known-hosts",
    help="known_hosts file for host-key checks (default ~/.ssh/known_hosts).",
    envvar="PDCTL_KNOWN_HOSTS",
)
ACCEPT_NEW = typer.Option(
    False,
    "--accept-new-host-keys",
    help="Trust hosts whose key is not in known_hosts yet and record it (a changed key is "
    "always refused).",
)
IDENTITY = typer.Option(
    None, "--identity", "-i", help="SSH private key for hosts that set no identityFile.",
    envvar="PDCTL_SSH_IDENTITY",
)
DOCKER_URL = typer.Option(
    None,
    "--docker-url",
    help="HOST=URL: drive the Docker engine of a `runtime: docker` host through the docker "
    "SDK (unix:///var/run/docker.sock, ssh://user@host, or tcp://HOST:PORT with --docker-tls) "
    "instead of scripts over SSH. "
    "Repeat per host.",
)
DOCKER_NETWORK = typer.Option(
    "bridge", "--docker-network", help="With --docker-url: bridge (publish ports) or host."
)
KUBECONFIG = typer.Option(None, "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG).")
CONTEXT = typer.Option(None, "--context", help="kubeconfig context.")


def load(spec: str, phase: int | None, target: str | None) -> tuple[Any, Any]:
    """Plan and render SPEC exactly as `pdctl render` does."""
    from pdctl.cli.options import check_phase_target
    from pdctl.cli.specfile import plan_from
    from pdctl.errors import SpecError
    from pdctl.render import render

    check_phase_target(phase, target)
    plan, source = plan_from(spec, phase, target)
    try:
        return plan, render(plan)
    except SpecError as exc:
        raise source.locate(exc) from None


def ssh_options(
    known_hosts: str | None, accept_new: bool, identity: str | None, dry_run: bool = False
) -> Any:
    """SSH options; a dry run trusts new keys (with accept_new) without writing known_hosts."""
    from pdctl.targets.ssh import DEFAULT_KNOWN_HOSTS, SshOptions

    return SshOptions(
        known_hosts=known_hosts or DEFAULT_KNOWN_HOSTS,
        accept_new_host_keys=accept_new,
        identity_file=identity,
        write_known_hosts=not dry_run,
    )


def kube_api(kubeconfig: str | None, context: str | None) -> Any:
    from pdctl.targets.kube import api_client

    return api_client(kubeconfig, context)


def read_secrets(plan: Any) -> dict[str, str]:
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


def print_changes(console: Any, changes: list[Any]) -> None:
    from rich.table import Table

    table = Table(title="plan", show_lines=False)
    for col in ("host", "unit", "role", "action", "why"):
        table.add_column(col)
    styles = {"start": "green", "restart": "yellow", "stop": "red", "keep": "dim"}
    for c in changes:
        table.add_row(c.host, c.unit, c.role, f"[{styles[c.action]}]{c.action}[/]", c.why)
    console.print(table)


def register(app: typer.Typer) -> None:
    @app.command("up")
    def up(
        spec: str = SPEC,
        yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
        dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan and stop."),
        offline: bool = typer.Option(
            False, "--offline", help="With --dry-run: do not connect to hosts; list what the "
            "spec would start (without comparing with what runs there).",
        ),
        keep_going: bool = typer.Option(
            False, "--keep-going", help="On a failure, undo only the failed instances (stop a "
            "new one, bring back the previous version of a replaced one) and go on with the "
            "rest; still exit 1. Without it a failure undoes the whole run.",
        ),
        timeout: int = typer.Option(
            900, "--timeout", help="Seconds each stage may take to become healthy."
        ),
        parallel: int = typer.Option(8, "--parallel", help="Hosts worked on at once."),
        phase: int | None = PHASE,
        target: str | None = TARGET,
        known_hosts: str | None = KNOWN_HOSTS,
        accept_new_host_keys: bool = ACCEPT_NEW,
        identity: str | None = IDENTITY,
        kubeconfig: str | None = KUBECONFIG,
        context: str | None = CONTEXT,
        docker_url: list[str] | None = DOCKER_URL,
        docker_network: str = DOCKER_NETWORK,
        docker_tls: bool = DOCKER_TLS,
        docker_cert_path: str | None = DOCKER_CERT_PATH,
        insecure_docker: bool = INSECURE_DOCKER,
    ) -> None:
        """Start SPEC's deployment (or bring it in line with SPEC) and wait until healthy."""
        from rich.console import Console

        from pdctl.errors import PdctlError, UsageError

        if offline and not dry_run:
            raise UsageError("--offline works only with --dry-run", fix="add --dry-run")
        console = Console(highlight=False, log_path=False)
        plan, bundle = load(spec, phase, target)
        if offline:
            print_offline(console, plan, bundle, bool(docker_url))
            return
        if plan.target == "kubernetes":
            _up_kube(console, plan, bundle, yes, dry_run, timeout, kubeconfig, context)
            return
        secrets = {} if dry_run else read_secrets(plan)
        if docker_url:
            from pdctl.cli.options import docker_access

            access = docker_access(docker_tls, docker_cert_path, insecure_docker,
                                   ssh_options(known_hosts, accept_new_host_keys, identity,
                                               dry_run))
            _up_containers(console, plan, docker_url, docker_network, secrets, yes, dry_run,
                           timeout, access)
            return
        from pdctl.targets.hosts import HostsTarget, UpFailed, endpoints
        from pdctl.targets.ssh import Unreachable

        tgt = HostsTarget(
            plan,
            bundle,
            ssh_options(known_hosts, accept_new_host_keys, identity, dry_run),
            parallel=parallel,
            say=lambda msg: console.log(msg),
        )
        try:
            try:
                changes = tgt.changes()
            except Unreachable as exc:
                hint = "show the plan without connecting: --dry-run --offline"
                raise PdctlError(f"{exc.line()}; check the address, or {hint}") from None
            print_changes(console, changes)
            todo = [c for c in changes if c.action != "keep"]
            if not todo:
                console.print("nothing to change: every instance is running the current spec")
            if dry_run:
                return
            if todo and not yes and not typer.confirm("apply these changes?", default=False):
                raise typer.Abort()
            try:
                with console.status("applying; waiting for /health and /v1/models ..."), \
                        ctrl_c(tgt.interrupt, tgt.hurry):
                    outcome = tgt.up(changes, secrets, timeout=timeout, keep_going=keep_going)
            except UpFailed as exc:
                report_failures(console, exc.failures)
                report_undo(console, exc.outcome)
                raise PdctlError(f"up failed: {exc.line()}") from None
            failures = outcome.failures
            if failures:
                report_failures(console, failures)
                report_undo(console, outcome)
            console.print("[bold]ready.[/] send requests to:")
            for url in endpoints(plan, tgt.desired()):
                console.print(f"  {url}  (model {plan.served_name})")
            if failures:
                names = ", ".join(f.unit for f in failures)
                raise PdctlError(f"up failed for {names} (--keep-going went on with the others); "
                                 f"{outcome.summary()}")
        finally:
            tgt.close()


def print_offline(console: Any, plan: Any, bundle: Any, containers: bool) -> None:
    """`up --dry-run --offline`: what the spec starts, read from the render alone."""
    from dataclasses import replace

    if plan.target == "kubernetes":
        from pdctl.targets.kube import objects_of

        for obj in objects_of(bundle):
            console.print(f"apply {obj['kind']}/{obj['metadata']['name']}")
        return
    from pdctl.targets.state import desired_units, diff

    changes = [replace(c, why="not compared (--offline)")
               for c in diff(desired_units(plan, bundle), [])]
    print_changes(console, changes)
    where = "Docker hosts" if containers else "hosts"
    console.print(f"offline: the {where} were not contacted; without --offline, `up` compares "
                  "with what runs there and keeps what is current")


@contextmanager
def ctrl_c(interrupt: Any, hurry: Any) -> Iterator[None]:
    """While applying, Ctrl-C does not cut a remote step in half: the first sets `interrupt`
    (the run is undone after the current step), the second `hurry` (undo without waiting
    for health), a third raises KeyboardInterrupt (undo abandoned, reported as unknown)."""
    import signal

    def handler(_signum: int, _frame: Any) -> None:
        if not interrupt.is_set():
            interrupt.set()
        elif not hurry.is_set():
            hurry.set()
        else:
            raise KeyboardInterrupt

    old = signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def report_undo(console: Any, outcome: Any) -> None:
    """How the run left what it had changed: restored, stopped, or not undone (and why)."""
    if outcome.stopped or not (outcome.restored or outcome.left):
        console.print(f"stopped what this run started: {', '.join(outcome.stopped) or '-'}")
    for what in outcome.restored:
        console.print(f"restored {what}")
    for what in outcome.left:
        console.print(f"[red]NOT undone[/] {what}")


def report_failures(console: Any, failures: list[Any]) -> None:
    for f in failures:
        if f.unit == "-":
            console.print(f"[red]{f.why}[/]")
            continue
        console.print(f"[red]FAILED[/] {f.unit} on host {f.host}: {f.why}")
        if f.log.strip():
            console.print("  last lines of its log:")
            for line in f.log.rstrip().splitlines()[-20:]:
                console.print(f"  | {line}", markup=False, soft_wrap=True)


def containers(plan: Any, urls: list[str], network: str, say: Any = None,
               access: Any = None) -> Any:
    from pdctl.errors import UsageError
    from pdctl.targets.containers import ContainerHosts, parse_urls

    if network not in ("bridge", "host"):
        raise UsageError(f"--docker-network must be bridge or host (got {network!r})")
    return ContainerHosts(plan, parse_urls(urls), network, say=say or (lambda _m: None),
                          **({"access": access} if access is not None else {}))


def _up_containers(console, plan, urls, network, secrets, yes, dry_run, timeout, access) -> None:  # type: ignore[no-untyped-def]
    tgt = containers(plan, urls, network, lambda msg: console.log(msg), access)
    changes = tgt.changes()
    print_changes(console, changes)
    todo = [c for c in changes if c.action != "keep"]
    if not todo:
        console.print("nothing to change: every instance is running the current spec")
    if dry_run:
        return
    if todo and not yes and not typer.confirm("apply these changes?", default=False):
        raise typer.Abort()
    with console.status("applying; waiting for /health and /v1/models ..."):
        tgt.up(changes, secrets, timeout)
    console.print("[bold]ready.[/] send requests to:")
    for url in tgt.endpoints():
        console.print(f"  {url}  (model {plan.served_name})")


def _up_kube(console, plan, bundle, yes, dry_run, timeout, kubeconfig, context) -> None:  # type: ignore[no-untyped-def]
    from pdctl.targets.kube import KubeTarget, objects_of

    tgt = KubeTarget(kube_api(kubeconfig, context) if not dry_run else None, plan.name,
                     plan.spec.kubernetes.namespace, say=lambda msg: console.log(msg))
    objs = objects_of(bundle)
    if dry_run:
        for obj in objs:
            console.print(f"apply {obj['kind']}/{obj['metadata']['name']}")
        return
    changes = tgt.changes(objs)
    for action, kind, name in changes:
        console.print(f"{action:8} {kind}/{name}")
    if not any(a != "unchanged" for a, _, _ in changes):
        console.print("nothing to change")
    elif not yes and not typer.confirm("apply these changes?", default=False):
        raise typer.Abort()
    tgt.apply(objs)
    tgt.wait(objs, timeout)
    console.print("[bold]applied.[/]")
