"""`pdctl status`: one row per instance: where, role, pid/container/pod, health, model."""

from __future__ import annotations

import json
from dataclasses import asdict

import typer

from pdctl.cli.options import (
    DOCKER_CERT_PATH,
    DOCKER_TLS,
    INSECURE_DOCKER,
    PHASE,
    SPEC,
    TARGET,
)
from pdctl.cli.up_cmd import (
    ACCEPT_NEW,
    CONTEXT,
    DOCKER_NETWORK,
    DOCKER_URL,
    IDENTITY,
    KNOWN_HOSTS,
    KUBECONFIG,
)


def register(app: typer.Typer) -> None:
    @app.command("status")
    def status(
        spec: str = SPEC,
        output: str = typer.Option("table", "--output", "-o", help="table or json."),
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
        """Show every instance of SPEC and whether it is healthy."""
        from rich.console import Console
        from rich.table import Table

        from pdctl.cli.up_cmd import kube_api, load, ssh_options
        from pdctl.errors import PdctlError, UsageError

        if output not in ("table", "json"):
            raise UsageError(f"--output must be table or json (got {output!r})")
        plan, bundle = load(spec, phase, target)
        unreachable: dict[str, str] = {}
        if plan.target == "kubernetes":
            from pdctl.targets.kube import KubeTarget

            tgt = KubeTarget(kube_api(kubeconfig, context), plan.name,
                             plan.spec.kubernetes.namespace)
            rows = tgt.status()
        elif docker_url:
            from pdctl.cli.options import docker_access
            from pdctl.cli.up_cmd import containers

            access = docker_access(docker_tls, docker_cert_path, insecure_docker,
                                   ssh_options(known_hosts, accept_new_host_keys, identity))
            rows = containers(plan, docker_url, docker_network, access=access).status()
        else:
            from pdctl.targets.hosts import HostsTarget

            hosts = HostsTarget(plan, bundle,
                                ssh_options(known_hosts, accept_new_host_keys, identity))
            try:
                rows = [asdict(r) for r in hosts.status()]
            finally:
                hosts.close()
            unreachable = hosts.unreachable
        failed = None
        if unreachable:  # the rows say `unreachable`; the exit status and stderr say why
            failed = PdctlError("cannot reach " + "; ".join(unreachable.values()))
        if output == "json":
            gone = [{"host": h, "error": why} for h, why in sorted(unreachable.items())]
            typer.echo(json.dumps({"name": plan.name, "instances": rows, "unreachable": gone},
                                  indent=2))
            if failed:
                raise failed
            return
        table = Table(title=f"{plan.name} (phase {plan.phase}, {plan.target})")
        columns = list(rows[0]) if rows else ["host", "unit", "role", "state"]
        for col in columns:
            table.add_column(col)
        for row in rows:
            table.add_row(*(str(row.get(c, "")) for c in columns))
        Console(highlight=False).print(table)
        if failed:
            raise failed
