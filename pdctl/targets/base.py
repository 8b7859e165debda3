"""The one interface every target implements, with the types its verbs answer in.

A target is where a bundle runs: hosts over SSH (the package `hosts/`), Docker engines
through the docker SDK (`docker/`), or a Kubernetes cluster (`kube/`). Each has the same
verbs: `changes` (what `apply` would do), `diff` (the changes with the text of what changes
inside them), `apply`, `status`, `logs`, `down`, `down_plan` (what `down` would remove),
`endpoints`, `observe` (an Observer: how `top`, `bench` and `adapters` read the live
deployment), and is a context manager that closes its connections on exit. What a target can
do beyond the verbs is data, its package's `CAPABILITIES` (a `Capabilities`, read without
connecting: `pdctl.targets.capabilities`): actions and the CLI ask it instead of the target's
type. The one function that picks and opens a plan's
target is `pdctl.targets.open_target`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Protocol

from pdctl.targets.ssh import DEFAULT_KNOWN_HOSTS, SshOptions
from pdctl.targets.state import START_GRACE, Change

if TYPE_CHECKING:
    from pdctl.targets.docker.transport import DockerAccess
    from pdctl.targets.outcome import Outcome

Say = Callable[[str], None]


@dataclass(frozen=True)
class Stage:
    """Where one instance is while `up` or `down` waits for it: its stage (pulling image,
    downloading weights, loading weights, compiling, capturing graphs, starting server,
    healthy; on Kubernetes also scheduling, creating, failing), the seconds waited of the
    timeout, and the latest meaningful line of its log (or the pod's reason)."""

    unit: str
    where: str
    stage: str
    line: str
    elapsed: float
    timeout: float


StageFn = Callable[[Stage], None]
Write = Callable[[str], object]
TargetKind = Literal["hosts", "docker", "kubernetes"]


@dataclass(frozen=True)
class Capabilities:
    """What a target can do beyond the common verbs, declared by its package (CAPABILITIES),
    so that actions and the CLI ask the capability instead of the target's type (as
    SkyPilot's CloudImplementationFeatures)."""

    kind: TargetKind
    named: str  # how a message names the target: "SSH hosts", "--docker-url", "Kubernetes"
    # What a failed `up` leaves, in words: the CLI says it when refusing --keep-going.
    undo: str
    # The rest: False unless the package names it.
    # `up --dry-run` asks the server (Kubernetes: every object applied with dryRun=All)
    # instead of comparing what runs with the bundle.
    server_dry_run: bool = False
    # `up --keep-going`: a failed unit does not stop the others (hosts: unit by unit).
    keep_going: bool = False
    # `up` sends secret values (hosts and Docker write them into env files); else they are
    # referenced by name (Kubernetes Secrets) and pdctl reads none.
    sends_secrets: bool = False
    # `down` waits, up to its --timeout, until the instances are gone (Kubernetes: the pods).
    down_timeout: bool = False
    # `down --delete-volumes` removes what `down` keeps by default (Kubernetes: the PVCs).
    volumes: bool = False
    # `down` deletes what a team may share, so it asks first (--yes) and says `delete`.
    confirm_down: bool = False
    # down, status and logs go on past a host they cannot reach, naming it.
    partial: bool = False
    # Runs commands on the deployment's hosts (pdctl bench's load generator, the P/D canary).
    commands: bool = False
    # `pdctl restart UNIT`: restarts units that run as the bundle says (`changes(restart=)`).
    restarts: bool = False


@dataclass(frozen=True)
class StatusRow:
    """One instance of a deployment: where (host or node), which unit, its process id,
    container or pod state, health, the models it serves and where clients reach it."""

    host: str
    unit: str
    role: str
    pid: str
    state: str
    health: str
    model: str
    endpoint: str
    why: str = ""  # not healthy: why, in one line (Kubernetes: the pod's or rollout's reason)
    # "instance": a process, container or pod; "rollout": a Kubernetes workload's summary row
    # (Deployment, LeaderWorkerSet), shown but not counted as a unit.
    kind: str = "instance"
    # Who restarts a unit on a host that dies: systemd, docker (its restart policy) or nohup
    # (nothing); '' elsewhere.
    supervisor: str = ""


@dataclass
class Stopped:
    """What `down` did (or, from `down_plan`, would do): (where, what) removed, (kind, name)
    kept, hosts it could not reach (name -> why) and what may still run on each of them."""

    removed: list[tuple[str, str]] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)
    unreachable: dict[str, str] = field(default_factory=dict)
    left: dict[str, list[str]] = field(default_factory=dict)
    # SSH hosts, per host: the deployment folder after `down` (`removed`, `absent`: there was
    # none, `kept`: a unit is left); after `down_plan`, the folder `down` would remove.
    folders: dict[str, str] = field(default_factory=dict)
    # SSH hosts: the folder of the files `up --bundle` copied (render.host.bundle_dir), where
    # there is one: host -> (folder, state): the KiB it holds when kept ("" when du could not
    # say), `removed` (`down --delete-bundle`), or `failed <why>` when that failed
    bundles: dict[str, tuple[str, str]] = field(default_factory=dict)


@dataclass(frozen=True)
class Connect:
    """How to reach a plan's target (built once by the CLI from its connection options).

    `docker_urls` (host -> Docker URL) selects the docker SDK target for phase 0 hosts."""

    ssh: SshOptions = field(default_factory=SshOptions)
    parallel: int = 8
    docker_urls: dict[str, str] = field(default_factory=dict)
    docker_tls: bool = False
    docker_cert_path: str | None = None
    insecure_docker: bool = False
    kubeconfig: str | None = None
    context: str | None = None

    def docker_access(self) -> DockerAccess:
        """What --docker-tls, --docker-cert-path, --insecure-docker and the SSH options say
        about reaching Docker engines (docker/transport.py decides with it)."""
        from pdctl.targets.docker.transport import DEFAULT_CERT_PATH, DockerAccess

        return DockerAccess(
            tls=self.docker_tls, cert_path=self.docker_cert_path or DEFAULT_CERT_PATH,
            insecure=self.insecure_docker, ssh=self.ssh,
        )


@dataclass(frozen=True)
class Endpoint:
    """One instance to read (an engine, or the router's metrics port): where (host, or the
    pod's node), its port and address as seen from there."""

    name: str  # unit, or pod
    role: str
    where: str
    port: int
    address: str = "127.0.0.1"
    max_num_seqs: int | None = None
    gpus: tuple[tuple[str, int], ...] = ()


@dataclass(frozen=True)
class Reply:
    """An instance's answer to one HTTP request: `status` 0 when none came, `text` then says
    why in the target's words (naming the path), else the body; `at`: time.monotonic()."""

    status: int
    text: str
    at: float


@dataclass(frozen=True)
class Telemetry:
    """One host's GPU telemetry as read (`form`: the GPU probe's JSON lines, or dcgm-exporter's
    /metrics); `failed`: why none was read; `exited`: said when the probe's output has no GPU."""

    host: str
    text: str = ""
    form: Literal["probe", "dcgm"] = "probe"
    failed: str = ""
    exited: str = ""


class Observer(Protocol):
    """A running deployment read through its target (`Target.observe()`; `close()` when done):
    its instances, an HTTP request to one, the engines' log tails ({} where the target keeps
    none), every host's GPUs sampled over `window_s` by `command` (the GPU probe) where the
    target runs it, else what the cluster's exporter reports."""

    endpoints: list[Endpoint]
    workers: dict[str, tuple[str, str]]  # the engine URLs a router is given -> (name, role)
    unreachable: dict[str, str]

    def request(self, e: Endpoint, path: str, method: str = "GET", body: bytes = b"",
                headers: dict[str, str] | None = None, timeout: float = 10.0) -> Reply: ...

    def logs(self, lines: int = 2000) -> dict[str, str]: ...

    def gpus(self, command: str, window_s: float) -> list[Telemetry]: ...

    def close(self) -> None: ...


__all__ = [
    "DEFAULT_KNOWN_HOSTS", "Capabilities", "Connect", "Endpoint", "Observer", "Reply", "Telemetry",
    "Stage", "StageFn", "Stopped", "StatusRow", "Target",
]


class Closing:
    """`with target:` closes the target's connections on the way out (every target has
    `close`)."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):  # type: ignore[no-untyped-def]
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class Target(Protocol):
    @property
    def kind(self) -> TargetKind: ...

    @property
    def unreachable(self) -> dict[str, str]:
        """Hosts that `status` or `down` could not reach: name -> why."""
        ...

    def __enter__(self) -> Target: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def changes(
        self, grace: float = START_GRACE, restart: frozenset[str] = frozenset()
    ) -> list[Change]:
        """Connect and compare the bundle with what runs: one Change per unit or object.
        `grace`: how long a process unit's server may run without answering its health
        probe before it is planned as a restart (`up --timeout`; hosts only: containers and
        pods restart by their own policy and probes). `restart`: units to restart though
        they run as the bundle says (`pdctl restart`; targets whose Capabilities.restarts)."""
        ...

    def diff(self) -> tuple[list[Change], dict[str, str]]:
        """The changes as `pdctl diff` shows them, and per changed unit or object (key:
        `host/unit`, `Kind/name`) the unified diff of what changes inside it (none where there is
        no text to compare: Docker's containers); on Kubernetes the server's dry run."""
        ...

    def apply(
        self, changes: list[Change], secrets: dict[str, str], timeout: float = 900.0,
        keep_going: bool = False,
    ) -> Outcome:
        """Apply `changes` and wait until healthy; raises on failure (after undoing)."""
        ...

    def status(self) -> list[StatusRow]: ...

    def logs(self, unit: str | None, follow: bool, lines: int, write: Write) -> None: ...

    def down(self, delete_volumes: bool = False, timeout: float | None = None) -> Stopped:
        """Stop and remove what `up` started (twice is harmless); `delete_volumes` where
        `capabilities.volumes`, waiting up to `timeout` seconds (None: the target's default)
        where `capabilities.down_timeout`."""
        ...

    def down_plan(self, delete_volumes: bool = False) -> Stopped:
        """What `down` would stop, delete and keep, reading only."""
        ...

    def endpoints(self) -> list[str]:
        """Where clients send requests."""
        ...

    def observe(self) -> Observer:
        """The running deployment to read (connects; the observer closes the target)."""
        ...

    def interrupts(self) -> tuple[threading.Event, threading.Event] | None:
        """(interrupt, hurry) when a Ctrl-C during `apply` should set them (the target stops
        after the current step and undoes the run; the second: without waiting for health)
        instead of raising KeyboardInterrupt; None when it should raise."""
        ...
