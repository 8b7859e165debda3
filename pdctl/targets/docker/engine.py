"""The Docker target (docker SDK): engine containers owned by pdctl, found by labels.

Every container carries `pdctl.io/deployment`, `pdctl.io/unit`, `pdctl.io/role` and
`pdctl.io/hash` (the unit's spec digest): `up` leaves a running container whose hash matches,
replaces one whose hash differs, and never touches a container without this deployment's
label. The client comes from transport.py (the local socket, ssh:// over pdctl's SSH
connection, or tcp:// with TLS). docker is imported lazily.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pdctl.errors import PdctlError
from pdctl.plan.model import Unit
from pdctl.render.container import HostRun, host_run, kept
from pdctl.render.host import GRACE_SECONDS, unit_hash
from pdctl.targets.base import Stage
from pdctl.targets.docker.pull import present, pull
from pdctl.targets.state import Change

DEPLOYMENT = "pdctl.io/deployment"
NETWORK = "pdctl.io/network"  # the network the container runs on: host or bridge
HASH = "pdctl.io/hash"  # the unit's spec digest (render.host.unit_hash)


def client_for(base_url: str, access: Any = None, name: str = "docker", host: Any = None) -> Any:
    """A docker.DockerClient for `base_url`, as transport.py allows and secures it
    (default: no TLS options, so plain tcp:// is refused)."""
    from pdctl.targets.docker.transport import DockerAccess, connect

    return connect(name, base_url, access or DockerAccess(), host)


def docker_home(client: Any, base_url: str) -> str | None:
    """The home folder on the Docker host, for `~/` paths (the rendered script's "$HOME"):
    this machine's for a local socket, the SSH user's for ssh://; None where unknown (tcp://)."""
    scheme = base_url.split("://", 1)[0] if "://" in base_url else "unix"
    if scheme in ("unix", "npipe"):
        return os.path.expanduser("~")
    if scheme == "ssh":
        # The SDK's own paramiko connection to the host (docker.transport.sshconn).
        ssh = getattr(getattr(client.api, "_custom_adapter", None), "ssh_client", None)
        if ssh is not None:
            _stdin, out, _err = ssh.exec_command('printf %s "$HOME"', timeout=30)
            home = out.read().decode("utf-8", "replace").strip()
            if home.startswith("/"):
                return home
    return None


def host_path(path: str, home: str | None, what: str) -> str:
    """`path` on the Docker host, with a leading `~/` resolved against `home`."""
    if path.startswith("/"):
        return path.rstrip("/") or "/"
    if home is None:
        raise PdctlError(
            f"{what} {path}: cannot tell the home folder on this Docker host; "
            "give an absolute path in the spec"
        )
    rest = path[1:].strip("/")
    return home.rstrip("/") + (f"/{rest}" if rest else "")


def env_value(container: Any, name: str) -> str | None:
    """The value of the environment variable `name` the container runs with (from the
    engine's record of it, never a command line); None when it has none."""
    for item in (container.attrs.get("Config") or {}).get("Env") or []:
        key, sep, value = item.partition("=")
        if sep and key == name:
            return value
    return None


def labels(deployment: str, unit: Unit) -> dict[str, str]:
    return {
        DEPLOYMENT: deployment,
        "pdctl.io/unit": unit.name,
        "pdctl.io/role": unit.role,
        HASH: unit_hash(unit),
        "app.kubernetes.io/managed-by": "pdctl",
    }


def run_options(
    deployment: str,
    unit: Unit,
    secrets: dict[str, str],
    network: str,
    home: str | None = None,
    model_dir: str | None = None,
) -> dict:
    """Keyword arguments for `containers.create`: labels, GPUs, shm/ipc, ports, env, the
    restart policy and log rotation, and the mounts of docker-start.sh.j2: the host's HF cache
    (read-write) at the image's cache, and a model given as a host path (read-only) at the
    same path."""
    from docker.types import DeviceRequest, LogConfig

    assert unit.image is not None, f"{unit.name} is not a container unit"
    opts: dict[str, Any] = {
        "image": unit.image,
        "command": list(unit.command),
        "name": unit.name,
        "labels": {**labels(deployment, unit), NETWORK: network_of(unit, network)},
        "environment": {**dict(unit.env), **secrets},
        # vLLM's workers share tensors through shared memory: the host's IPC namespace.
        "ipc_mode": "host",
        "detach": True,
    }
    keep = kept(unit.host)
    opts["restart_policy"] = {"Name": keep.restart, "MaximumRetryCount": keep.retries}
    opts["log_config"] = LogConfig(
        type="json-file",
        config={"max-size": keep.log_max_size, "max-file": str(keep.log_max_files)},
    )
    cache = host_path(unit.host.hf_cache, home, f"host {unit.host.name}: hfCache")
    volumes = {cache: {"bind": "/root/.cache/huggingface", "mode": "rw"}}
    if model_dir:
        volumes[model_dir] = {"bind": model_dir, "mode": "ro"}
    opts["volumes"] = volumes
    if unit.gpus:
        opts["device_requests"] = [
            DeviceRequest(device_ids=[str(g) for g in unit.gpus], capabilities=[["gpu"]])
        ]
    run = host_run(unit)
    if run is not None:
        # Prefill/decode engines and group nodes: the host's network, whatever `network` says
        # (render.container), with the unit folder, HAMi-core and RDMA devices as start.sh has.
        add_host_run(opts, run, unit, deployment, home)
    elif network == "host":
        # No publishing on the host's network: the engine itself must listen on the host port
        # pdctl probes and clients use (the command names the in-container port).
        opts["network_mode"] = "host"
        opts["command"] = on_host_ports(list(unit.command), unit.publish)
    else:
        opts["ports"] = {
            f"{container}/tcp": int(host)
            for host, container in (mapping.split(":", 1) for mapping in unit.publish)
        }
    return opts


def network_of(unit: Unit, network: str) -> str:
    """The network `unit`'s container runs on: prefill/decode engines and group nodes always
    on the host's (render.container), a phase 0 engine on `network` (--docker-network)."""
    return "host" if host_run(unit) is not None else network


def on_host_ports(command: list[str], publish: tuple[str, ...]) -> list[str]:
    """`command` with each published container port given to `--port` replaced by its host
    port (`HOST:CONTAINER` mappings), for a container on the host's network."""
    ports = {container: host for host, container in (m.split(":", 1) for m in publish)}
    out = list(command)
    for i, word in enumerate(out):
        if word == "--port" and i + 1 < len(out) and out[i + 1] in ports:
            out[i + 1] = ports[out[i + 1]]
        elif word.startswith("--port=") and word[7:] in ports:
            out[i] = "--port=" + ports[word[7:]]
    return out


def add_host_run(opts: dict, run: HostRun, unit: Unit, deployment: str, home: str | None) -> None:
    """docker SDK options for a container on the host's network (render.container.HostRun)."""
    from docker.types import Ulimit

    opts["network_mode"] = "host"
    opts["environment"] = {**opts["environment"], **dict(run.env)}
    folder = f"{unit.host.data_dir.rstrip('/')}/{deployment}/{unit.name}"
    for mount in run.mounts:
        source = mount.source or folder
        where = host_path(source, home, f"{unit.name}: mount")
        opts["volumes"][where] = {"bind": mount.target, "mode": "ro" if mount.read_only else "rw"}
    if run.devices:
        opts["devices"] = [f"{d}:{d}:rwm" for d in run.devices]
    if run.cap_add:
        opts["cap_add"] = list(run.cap_add)
    if run.ulimits:
        opts["ulimits"] = [Ulimit(name=n, soft=v, hard=v) for n, v in run.ulimits]


@dataclass
class Engine:
    """One Docker engine (a docker SDK client) running containers of one deployment: what
    ContainerHosts (target.py) and wait.py take for each host."""

    client: Any
    deployment: str
    network: str = "bridge"  # "host": no port publishing; the engine's port is the host's
    say: Callable[[str], None] = lambda _m: None
    stop_seconds: int = GRACE_SECONDS  # SIGTERM, then SIGKILL after this long
    home: str | None = None  # the Docker host's home folder (docker_home), for `~/` paths
    model_dir: str | None = None  # a model given as a host path (render.host.model_dir)
    where: str = "docker"  # the host's name in the spec, for stage reports
    stage: Callable[[Stage], None] = lambda _s: None
    started: list[str] = field(default_factory=list)

    def containers(self) -> list[Any]:
        selector = {"label": f"{DEPLOYMENT}={self.deployment}"}
        found = self.client.containers.list(all=True, filters=selector)
        return [c for c in found if c.labels.get(DEPLOYMENT) == self.deployment]

    def changes(self, units: list[Unit]) -> list[Change]:
        live = {c.labels.get("pdctl.io/unit"): c for c in self.containers()}
        out = []
        for unit in units:
            c = live.get(unit.name)
            host = unit.host.name
            if c is None:
                out.append(Change(host, unit.name, unit.role, "start", "new"))
            elif c.labels.get(HASH) != unit_hash(unit):
                out.append(Change(host, unit.name, unit.role, "restart", "spec changed"))
            elif c.labels.get(NETWORK, net := network_of(unit, self.network)) != net:
                why = f"network {c.labels[NETWORK]} -> {net}"
                out.append(Change(host, unit.name, unit.role, "restart", why))
            elif c.status != "running":
                out.append(Change(host, unit.name, unit.role, "start", f"container {c.status}"))
            else:
                out.append(Change(host, unit.name, unit.role, "keep", "unchanged, running"))
        wanted = {u.name for u in units}
        for name, c in live.items():
            if name not in wanted:
                out.append(
                    Change(
                        "-",
                        str(name),
                        c.labels.get("pdctl.io/role", "-"),
                        "stop",
                        "no longer in the spec",
                    )
                )
        return out

    def pull_missing(self, units: list[Unit], changes: list[Change], timeout: float) -> None:
        """Pull the images of the units `changes` start or replace that the engine lacks,
        before anything is removed (a bad image fails while the old containers still run)."""
        todo = {c.unit for c in changes if c.action in ("start", "restart")}
        pulled: set[str] = set()
        for unit in units:
            image = unit.image
            if unit.name not in todo or image is None or image in pulled:
                continue
            pulled.add(image)
            if present(self.client, image):
                continue
            begun = time.monotonic()

            def report(line: str, name: str = unit.name, since: float = begun) -> None:
                elapsed = time.monotonic() - since
                self.stage(Stage(name, self.where, "pulling image", line, elapsed, timeout))

            self.say(f"pulling {image} on {self.where}")
            pull(self.client, image, f"{unit.name} on {self.where}", report)
            self.say(f"pulled {image} on {self.where}")

    def apply(self, units: list[Unit], changes: list[Change], secrets: dict[str, str]) -> None:
        """Remove what is gone or changed, create and start what is new or changed."""
        import docker

        by_name = {u.name: u for u in units}
        live = {c.labels.get("pdctl.io/unit"): c for c in self.containers()}
        for change in changes:
            if change.action in ("stop", "restart") or (
                change.action == "start" and change.unit in live
            ):
                self._remove(live[change.unit])
            if change.action not in ("start", "restart"):
                continue
            unit = by_name[change.unit]
            self._refuse_foreign(unit.name)
            try:
                container = self.client.containers.create(
                    **run_options(
                        self.deployment, unit, secrets, self.network, self.home, self.model_dir
                    )
                )
            except docker.errors.ImageNotFound:
                raise PdctlError(
                    f"{unit.name}: image {unit.image} is not on the Docker host "
                    "(pull or load it there first)"
                ) from None
            self.started.append(unit.name)
            try:
                container.start()
            except docker.errors.APIError as exc:
                # A container that failed to start stays in state Created: remove it.
                container.remove(force=True)
                raise PdctlError(
                    f"{unit.name}: the container did not start: {exc.explanation or exc}"
                ) from None
            self.say(f"started container {unit.name} ({container.short_id})")

    def _refuse_foreign(self, name: str) -> None:
        import docker

        try:
            other = self.client.containers.get(name)
        except docker.errors.NotFound:
            return
        raise PdctlError(
            f"a container named {name} exists that this deployment did not create "
            f"(labels {other.labels}); remove or rename it"
        )

    def _remove(self, container: Any) -> None:
        if container.labels.get(DEPLOYMENT) != self.deployment:
            raise PdctlError(f"refusing to remove {container.name}: not this deployment's")
        if container.status == "running":
            unit = container.labels.get("pdctl.io/unit", container.name)
            self.stage(Stage(unit, self.where, "stopping", "", 0.0, self.stop_seconds))
            container.stop(timeout=self.stop_seconds)
        container.remove(force=True)
        self.say(f"removed container {container.name}")

    def rollback(self) -> None:
        """Remove the containers this run created (after a failure or Ctrl-C)."""
        live = {c.labels.get("pdctl.io/unit"): c for c in self.containers()}
        for name in reversed(self.started):
            if name in live:
                self._remove(live[name])

    def down(self) -> list[str]:
        gone = []
        for c in self.containers():
            self._remove(c)
            gone.append(c.name)
        return gone

    def tail(self, name: str, lines: int = 100) -> str:
        return self.client.containers.get(name).logs(tail=lines).decode("utf-8", "replace")

    def follow(self, name: str, write: Callable[[str], object], lines: int = 100) -> None:
        """Print a container's last `lines` and every new one until Ctrl-C or it ends."""
        stream = self.client.containers.get(name).logs(tail=lines, stream=True, follow=True)
        try:
            for chunk in stream:
                write(chunk.decode("utf-8", "replace"))
        except KeyboardInterrupt:
            pass
