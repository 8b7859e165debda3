"""The Docker target (docker SDK): the bundle's containers (render/container.py), found again
by their labels.

Every container carries `pdctl.io/deployment`, `pdctl.io/unit`, `pdctl.io/role` and
`pdctl.io/hash` (the unit's hash, from render): `up` leaves a running container whose hash
matches, replaces one whose hash differs, and never touches a container without this
deployment's label. The client comes from transport.py (the local socket, ssh:// over pdctl's SSH
connection, or tcp:// with TLS). docker is imported lazily.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pdctl.errors import PdctlError
from pdctl.render.container import DEPLOYMENT, HASH, UNIT, Container
from pdctl.render.host import GRACE_SECONDS
from pdctl.targets.base import Stage
from pdctl.targets.docker.pull import present, pull
from pdctl.targets.docker.transport import DockerAccess, connect
from pdctl.targets.health import API_KEY_ENV, Health, probe
from pdctl.targets.outcome import NoLog
from pdctl.targets.state import Change, Observed


def client_for(base_url: str, access: Any = None, name: str = "docker", host: Any = None) -> Any:
    """A docker.DockerClient for `base_url`, as transport.py allows and secures it
    (default: no TLS options, so plain tcp:// is refused)."""
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


def create_kwargs(c: Container, secrets: dict[str, str], home: str | None = None) -> dict:
    """`containers.create` keyword arguments for the rendered container `c`, option for option
    what docker-start.sh.j2 writes for `docker run` (tests/render/test_docker_pd.py holds the
    two side by side); `secrets`: the values of its `secret_env` names; `home`:
    the Docker host's home folder for `~/` mount sources."""
    from docker.types import DeviceRequest, LogConfig, Ulimit

    keep = c.kept
    env = {name: secrets[name] for name in c.secret_env if name in secrets}
    volumes = {}
    for m in c.mounts:
        source = host_path(m.source or c.unit_dir, home, f"{c.name}: mount {m.target}")
        volumes[source] = {"bind": m.target, "mode": "ro" if m.read_only else "rw"}
    opts: dict[str, Any] = {
        "image": c.image, "command": list(c.args), "name": c.name, "labels": dict(c.labels),
        "environment": {**env, **dict(c.env)},
        "ipc_mode": "host",  # --ipc=host
        "restart_policy": {"Name": keep.restart, "MaximumRetryCount": keep.retries},
        "log_config": LogConfig(
            type="json-file",
            config={"max-size": keep.log_max_size, "max-file": str(keep.log_max_files)},
        ),
        "volumes": volumes,
    }
    gpus = [str(g) for g in c.gpus]  # --gpus "device=0,1"
    optional = {  # each only where the container has it
        "entrypoint": [c.entrypoint] if c.entrypoint else None,
        "network_mode": "host" if c.host_network else None,
        "ports": {f"{inside}/tcp": host for host, inside in c.ports},
        "device_requests": [DeviceRequest(device_ids=gpus, capabilities=[["gpu"]])] if gpus else [],
        "devices": [f"{d}:{d}:rwm" for d in c.devices],
        "cap_add": list(c.cap_add),
        "ulimits": [Ulimit(name=n, soft=v, hard=v) for n, v in c.ulimits],
    }
    return opts | {key: value for key, value in optional.items() if value}


def observed(host: str, c: Any) -> Observed:
    """A container as the hosts target reads a unit (state.Observed): its unit and hash labels,
    its status, its short id as the pid, how often Docker restarted it."""
    count, running = int(c.attrs.get("RestartCount") or 0), c.status == "running"
    unit, digest = c.labels.get(UNIT, c.name), c.labels.get(HASH, "")
    return Observed(host, unit, digest, running, c.short_id, count, c.status, "docker")


def restart_policy(container: Any) -> str:
    """The container's restart policy as `docker run --restart` writes it."""
    policy = (container.attrs.get("HostConfig") or {}).get("RestartPolicy") or {}
    name, retries = policy.get("Name") or "no", policy.get("MaximumRetryCount") or 0
    return f"{name}:{retries}" if retries else name


@dataclass
class Engine:
    """One Docker engine (a docker SDK client) running containers of one deployment: a host's
    operations (pdctl.targets.hosts.per_host.UnitOps) for the hosts' shared verbs and health
    wait, and the containers' create, replace and remove for ContainerHosts.apply and down."""

    client: Any
    deployment: str
    say: Callable[[str], None] = lambda _m: None
    stop_seconds: int = GRACE_SECONDS  # SIGTERM, then SIGKILL after this long
    home: str | None = None  # the Docker host's home folder (docker_home), for `~/` paths
    where: str = "docker"  # the host's name in the spec, for stage reports
    stage: Callable[[Stage], None] = lambda _s: None
    address: str = "127.0.0.1"  # the host's address: engines are probed there from pdctl
    started: list[str] = field(default_factory=list)
    restarts: dict[str, int] = field(default_factory=dict)  # the count each was first seen with
    last: dict[str, Any] = field(default_factory=dict)  # unit -> its container as alive() saw it

    @property
    def name(self) -> str:
        return self.where

    def containers(self) -> list[Any]:
        selector = {"label": f"{DEPLOYMENT}={self.deployment}"}
        found = self.client.containers.list(all=True, filters=selector)
        return [c for c in found if c.labels.get(DEPLOYMENT) == self.deployment]

    def observe(self) -> list[Observed]:
        return [observed(self.where, c) for c in self.containers()]

    def get(self, unit: str) -> Any:
        """This deployment's container of `unit`; None when there is none."""
        import docker

        try:
            c = self.client.containers.get(unit)
        except docker.errors.NotFound:
            return None
        return c if c.labels.get(DEPLOYMENT) == self.deployment else None

    def probe(
        self, port: int, model: str, path: str = "/health", unit: str | None = None,
        address: str = "127.0.0.1",
    ) -> Health:
        """The engine's health on its host's address and `port`, from where pdctl runs, with
        the API key the container runs with (in a request header only)."""
        c = self.get(unit) if unit is not None else None
        key = env_value(c, API_KEY_ENV) if c is not None else None
        opener = lambda: socket.create_connection((self.address, port), timeout=5)  # noqa: E731
        return probe(opener, model, path, api_key=key)

    def alive(self, unit: str) -> bool:
        """Whether the unit's container runs, and Docker has not restarted it since this run
        started it or first looked at it: an engine that dies while loading would otherwise
        load again and again (its restart policy) until the deadline."""
        c = self.last[unit] = self.get(unit)
        if c is None:
            return False
        count = int(c.attrs.get("RestartCount") or 0)
        first = self.restarts.setdefault(unit, 0 if unit in self.started else count)
        return c.status == "running" and count <= first

    def ended(self, unit: str) -> str:
        c = self.last.get(unit)
        if c is None:
            return "the container is gone"
        why = f"the container exited (status {c.attrs['State'].get('ExitCode')})"
        if c.status == "restarting" or int(c.attrs.get("RestartCount") or 0) > self.restarts[unit]:
            return f"{why} and Docker restarted it (restart policy {restart_policy(c)})"
        return why

    def tails(self, units: list[str], lines: int = 20, missing_ok: bool = False) -> dict[str, str]:
        """The last `lines` of each unit's container log; NoLog for units without a container
        (never started, or removed by down) unless `missing_ok` (then '')."""
        out, missing = {}, []
        for unit in units:
            c = self.get(unit)
            out[unit] = "" if c is None else c.logs(tail=lines).decode("utf-8", "replace")
            if c is None:
                missing.append(unit)
        if missing and not missing_ok:
            raise NoLog(missing, self.where)
        return out

    def tail(self, unit: str, lines: int = 20) -> str:
        return self.tails([unit], lines, missing_ok=True)[unit]

    def follow(self, unit: str, write: Callable[[str], object], lines: int = 50) -> None:
        """Print a container's last `lines` and every new one until Ctrl-C or it ends."""
        c = self.get(unit)
        if c is None:
            raise NoLog([unit], self.where)
        for chunk in c.logs(tail=lines, stream=True, follow=True):
            write(chunk.decode("utf-8", "replace"))

    def pull_missing(self, wanted: list[Container], changes: list[Change], timeout: float) -> None:
        """Pull the images of the containers `changes` start or replace that the engine lacks,
        before anything is removed (a bad image fails while the old containers still run)."""
        todo = {c.unit for c in changes if c.action in ("start", "restart")}
        pulled: set[str] = set()
        for unit in wanted:
            image = unit.image
            if unit.name not in todo or image in pulled:
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

    def apply(self, wanted: list[Container], changes: list[Change], secrets: dict) -> None:
        """Remove what is gone or changed, create and start what is new or changed."""
        import docker

        by_name = {u.name: u for u in wanted}
        live = {c.labels.get(UNIT): c for c in self.containers()}
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
                container = self.client.containers.create(**create_kwargs(unit, secrets, self.home))
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
            unit = container.labels.get(UNIT, container.name)
            self.stage(Stage(unit, self.where, "stopping", "", 0.0, self.stop_seconds))
            container.stop(timeout=self.stop_seconds)
        container.remove(force=True)
        self.say(f"removed container {container.name}")

    def rollback(self) -> list[str]:
        """Remove the containers this run created (after a failure or Ctrl-C); their names."""
        live = {c.labels.get(UNIT): c for c in self.containers()}
        gone = [name for name in reversed(self.started) if name in live]
        for name in gone:
            self._remove(live[name])
        return gone

    def down(self) -> list[str]:
        gone = []
        for c in self.containers():
            self._remove(c)
            gone.append(c.name)
        return gone
