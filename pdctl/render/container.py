"""How an engine container on a host runs when it shares the host's network: prefill/decode
engines (phase 2/3) and the nodes of multi-node groups, whose KV transfer, NIXL side channels,
NCCL and rendezvous ports must be the host's own (`docker run -p` maps only the HTTP port).

A container unit without published ports (plan.units: `publish` empty) gets:
- `--network host`: every port the engine opens is the host's; the plan's port list and the
  health probe use the spec's ports directly;
- the unit folder mounted at UNIT_MOUNT, so files pdctl writes there (mooncake.json, HAMi-core's
  shared cache) are seen inside; environment values that point into the unit folder are
  rewritten to that mount;
- phase 3: HAMi-core's library mounted read-only at HAMI_LIBRARY (where HAMi's device plugin
  puts it in Kubernetes containers) and LD_PRELOAD pointing there, and /tmp/vgpulock shared
  with the host (HAMi-core's lock, one per host for every slice on it);
- RDMA (the host lists rdmaDevices): `/dev/infiniband`, CAP_IPC_LOCK and an unlimited memlock
  ulimit, which verbs need to pin memory (Mooncake's docs: containers need /dev/infiniband,
  IPC_LOCK and often host networking).
`--ipc host` (CUDA IPC, NCCL shared memory, /dev/shm) every engine container gets already.
Every container pdctl starts also gets its host's restart policy and json-file log rotation
(`Kept`: hosts[].restart, logMaxSize, logMaxFiles).
The plan decides which units these are (no `publish`), their environment and the host's RDMA
devices; this module spells each container unit once as a `Container`: bundle data that
docker-start.sh.j2 writes as `docker run` options (over SSH) and the docker SDK target maps
to `containers.create` keyword arguments (`--docker-url`), so both paths start the same
container and neither computes options of its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from pdctl.plan.guard import UNIT_MOUNT
from pdctl.plan.hami_host import LOCK_DIR
from pdctl.plan.model import Plan, Unit
from pdctl.spec.model import Host

HF_MOUNT = "/root/.cache/huggingface"  # the image's Hugging Face cache
HAMI_LIBRARY = "/usr/local/vgpu/libvgpu.so"
RDMA_DEVICE = "/dev/infiniband"


@dataclass(frozen=True)
class Mount:
    """`source` on the host ('' = the unit's own folder, "$unit_dir" in start.sh; `~/`: the
    home folder of the host's user)."""

    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class HostRun:
    env: tuple[tuple[str, str], ...]  # the container's environment (paths rewritten)
    mounts: tuple[Mount, ...]
    devices: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    ulimits: tuple[tuple[str, int], ...] = ()  # (name, soft=hard); -1: unlimited

    def as_data(self) -> list:
        """For the unit's hash."""
        return [
            self.env, [(m.source, m.target, m.read_only) for m in self.mounts], self.devices,
            self.cap_add, self.ulimits,
        ]


@dataclass(frozen=True)
class Kept:
    """How Docker keeps a container: its restart policy (`docker run --restart`, Docker's
    https://docs.docker.com/engine/containers/start-containers-automatically/) and the
    json-file log driver's rotation (https://docs.docker.com/engine/logging/drivers/json-file/)."""

    restart: str  # no | always | unless-stopped | on-failure
    retries: int  # on-failure:N; 0: no limit
    log_max_size: str
    log_max_files: int

    @property
    def restart_flag(self) -> str:
        return f"{self.restart}:{self.retries}" if self.retries else self.restart

    def as_data(self) -> list:
        """For the unit's hash."""
        return [self.restart_flag, self.log_max_size, self.log_max_files]


def kept(host: Host) -> Kept:
    name, _, retries = host.restart.partition(":")
    return Kept(name, int(retries or 0), host.log_max_size, host.log_max_files)


def in_unit_folder(unit: Unit, value: str) -> str | None:
    """The part of `value` after the unit's folder (data_dir/<deployment>/<unit>/), or None."""
    base = unit.host.data_dir.rstrip("/") + "/"
    mark = f"/{unit.name}/"
    if not value.startswith(base) or mark not in value[len(base) :]:
        return None
    return value[value.index(mark, len(base) - 1) + len(mark) :]


def host_run(unit: Unit) -> HostRun | None:
    """None: not a container, or a container with published ports (phase 0's bridge form)."""
    if unit.image is None or unit.publish:
        return None
    mounts = [Mount("", UNIT_MOUNT)]
    env = []
    for key, value in unit.env:
        if key == "LD_PRELOAD":
            mounts.append(Mount(value, HAMI_LIBRARY, read_only=True))
            mounts.append(Mount(LOCK_DIR, LOCK_DIR))
            value = HAMI_LIBRARY
        elif (rest := in_unit_folder(unit, value)) is not None:
            value = f"{UNIT_MOUNT}/{rest}"
        env.append((key, value))
    if not unit.host.rdma_devices:
        return HostRun(tuple(env), tuple(mounts))
    return HostRun(
        tuple(env), tuple(mounts), devices=(RDMA_DEVICE,), cap_add=("IPC_LOCK",),
        ulimits=(("memlock", -1),),
    )


@dataclass(frozen=True)
class Container:
    """One container unit as both paths start it: `docker run` in start.sh and the docker SDK's
    `containers.create`. Secrets are named only (`secret_env`): their values come from the
    deployment's secrets.env over SSH, from the secrets `up` holds through the SDK."""

    name: str
    image: str
    args: tuple[str, ...]  # after the image (its entrypoint is `vllm serve`, or `entrypoint`)
    labels: tuple[tuple[str, str], ...]  # incl. pdctl.io/hash, the unit's hash
    env: tuple[tuple[str, str], ...]
    secret_env: tuple[str, ...]
    unit_dir: str  # the unit's folder on the host (the source of Mount(""))
    mounts: tuple[Mount, ...]
    gpus: tuple[int, ...]  # `--gpus device=...`: a device request
    host_network: bool  # else the default bridge with `ports` published
    ports: tuple[tuple[int, int], ...]  # (host port, container port)
    kept: Kept
    devices: tuple[str, ...] = ()
    cap_add: tuple[str, ...] = ()
    ulimits: tuple[tuple[str, int], ...] = ()
    entrypoint: str = ""  # `docker run --entrypoint` (the group guard's python3), else the image's

    @property
    def hash(self) -> str:
        return dict(self.labels)[HASH]


HASH = "pdctl.io/hash"
DEPLOYMENT = "pdctl.io/deployment"
UNIT = "pdctl.io/unit"
ROLE = "pdctl.io/role"


def model_dir(plan: Plan) -> str | None:
    """A model given as a host path must be mounted into the container at the same path."""
    name = plan.spec.model.name
    return name.rstrip("/") or None if name.startswith("/") else None


def container(
    unit: Unit, digest: str, deployment: str, unit_dir: str, secret_env: tuple[str, ...] = (),
    model: str | None = None, adapters: tuple[Mount, ...] = (),
) -> Container:
    """`unit` (a container unit: `image` set) as a Container: `digest` is its unit hash,
    `unit_dir` its folder on the host, `secret_env` the deployment's secrets, `model` a model
    given as a host path (model_dir), `adapters` the engine's LoRA adapter mounts."""
    assert unit.image is not None, f"{unit.name} is not a container unit"
    run = host_run(unit)
    mounts = list(run.mounts) if run is not None else []
    mounts.append(Mount(unit.host.hf_cache, HF_MOUNT))
    if model is not None:
        mounts.append(Mount(model, model, read_only=True))
    mounts.extend(adapters)
    labels = (
        (DEPLOYMENT, deployment), (UNIT, unit.name), (ROLE, unit.role), (HASH, digest),
        ("app.kubernetes.io/managed-by", "pdctl"),
    )
    ports = tuple((int(h), int(c)) for h, c in (m.split(":", 1) for m in unit.publish))
    return Container(
        name=unit.name, image=unit.image, args=unit.command, labels=labels,
        env=run.env if run is not None else unit.env, secret_env=secret_env, unit_dir=unit_dir,
        mounts=tuple(mounts), gpus=unit.gpus, host_network=run is not None, ports=ports,
        kept=kept(unit.host), devices=run.devices if run is not None else (),
        cap_add=run.cap_add if run is not None else (),
        ulimits=run.ulimits if run is not None else (), entrypoint=unit.entrypoint,
    )
