"""`pdctl down`: stop and remove exactly what `pdctl up` started; twice is harmless."""

from __future__ import annotations

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
    @app.command("down")
    def down(
        spec: str = SPEC,
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
        delete_volumes: bool = typer.Option(
            False, "--delete-volumes",
            help="Kubernetes: delete the deployment's PersistentVolumeClaims too (the model "
            "cache: weights are downloaded again on the next `up`). Kept by default.",
        ),
    ) -> None:
        """Stop SPEC's processes, containers or Kubernetes objects and remove their files."""
        from rich.console import Console

        from pdctl.cli.up_cmd import kube_api, load, ssh_options

        console = Console(highlight=False, log_path=False)
        plan, bundle = load(spec, phase, target)
        if plan.target == "kubernetes":
            from pdctl.targets.kube import KubeTarget

            tgt = KubeTarget(kube_api(kubeconfig, context), plan.name,
                             plan.spec.kubernetes.namespace, say=lambda m: console.log(m))
            deleted = tgt.delete(volumes=delete_volumes)
            console.print(f"deleted {len(deleted)} objects" if deleted else "nothing to delete")
            for kind, name in tgt.kept:
                console.print(f"kept {kind} {name}; --delete-volumes removes it")
            return
        if docker_url:
            from pdctl.cli.options import docker_access
            from pdctl.cli.up_cmd import containers

            access = docker_access(docker_tls, docker_cert_path, insecure_docker,
                                   ssh_options(known_hosts, accept_new_host_keys, identity))
            removed = containers(plan, docker_url, docker_network, access=access).down()
            for host, name in removed:
                console.print(f"removed container {name} on {host}")
            console.print("nothing was running" if not removed else "done")
            return
        from pdctl.errors import PdctlError
        from pdctl.targets.hosts import HostsTarget

        hosts = HostsTarget(plan, bundle, ssh_options(known_hosts, accept_new_host_keys, identity),
                            say=lambda m: console.log(m))
        try:
            stopped = hosts.down()
        finally:
            hosts.close()
        for host, unit in stopped:
            console.print(f"stopped {unit} on {host}")
        if not hosts.unreachable:
            if not stopped:
                console.print("nothing was running")
            console.print(f"removed the deployment folder of {plan.name!r} on every host")
            return
        done = sorted({h.name for h in plan.spec.hosts} - set(hosts.unreachable))
        if done:
            console.print(f"removed the deployment folder of {plan.name!r} on {', '.join(done)}")
        left = []
        for host, why in sorted(hosts.unreachable.items()):
            units = ", ".join(hosts.left_on(host)) or "-"
            console.print(f"[red]NOT stopped[/] on {host}: {units} ({why})", soft_wrap=True)
            left.append(f"{host} ({units})")
        raise PdctlError(f"down could not reach {'; '.join(left)}: these may still be running; "
                         "run `pdctl down` again when the host answers")
