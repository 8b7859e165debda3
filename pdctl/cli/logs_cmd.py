"""`pdctl logs SPEC [UNIT] [-f]`: an instance's log (remote file, container or pod)."""

from __future__ import annotations

import sys

import typer

from pdctl.cli.options import PHASE, SPEC, TARGET
from pdctl.cli.up_cmd import ACCEPT_NEW, CONTEXT, IDENTITY, KNOWN_HOSTS, KUBECONFIG


def register(app: typer.Typer) -> None:
    @app.command("logs")
    def logs(
        spec: str = SPEC,
        unit: str | None = typer.Argument(None, help="Instance (unit or pod) name."),
        follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines."),
        lines: int = typer.Option(100, "--lines", "-n", help="How many lines from the end."),
        phase: int | None = PHASE,
        target: str | None = TARGET,
        known_hosts: str | None = KNOWN_HOSTS,
        accept_new_host_keys: bool = ACCEPT_NEW,
        identity: str | None = IDENTITY,
        kubeconfig: str | None = KUBECONFIG,
        context: str | None = CONTEXT,
    ) -> None:
        """Print the log of UNIT (every unit's last lines when UNIT is left out)."""
        from pdctl.cli.up_cmd import kube_api, load, ssh_options
        from pdctl.errors import UsageError

        plan, bundle = load(spec, phase, target)
        if plan.target == "kubernetes":
            from pdctl.targets.kube import KubeTarget

            tgt = KubeTarget(kube_api(kubeconfig, context), plan.name,
                             plan.spec.kubernetes.namespace)
            tgt.logs(unit, lines, follow, sys.stdout.write)
            return
        from pdctl.targets.hosts import HostsTarget

        hosts = HostsTarget(plan, bundle, ssh_options(known_hosts, accept_new_host_keys, identity))
        try:
            units = hosts.units()
            chosen = [u for u in units if unit is None or u[1] == unit]
            if not chosen:
                known = ", ".join(u for _, u in units) or "none"
                raise UsageError(f"no unit {unit!r} in {plan.name!r} (units: {known})")
            if follow and len(chosen) > 1:
                raise UsageError("-f follows one unit: name it (see `pdctl status`)")
            for host, name in chosen:
                ops = hosts.ops[host]
                if follow:
                    try:
                        ops.follow(name, sys.stdout.write, lines)
                    except KeyboardInterrupt:
                        pass
                    return
                if len(chosen) > 1:
                    sys.stdout.write(f"==> {name} on {host} <==\n")
                sys.stdout.write(ops.tail(name, lines))
        finally:
            hosts.close()
