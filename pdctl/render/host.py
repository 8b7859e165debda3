"""Bare-metal artifacts: start and stop scripts per unit (engine, router, ...) per host."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import replace

from pdctl import __version__
from pdctl.plan.model import ENGINE_ROLES, Plan, Unit
from pdctl.render.bundle import Artifact, UnitFiles, script_digest
from pdctl.render.container import HF_MOUNT, Mount, container, host_run, kept, model_dir
from pdctl.render.hami_host import slice_setup
from pdctl.render.supervise import supervise_files, supervise_vars
from pdctl.render.template import render_template
from pdctl.spec.lora import FETCH_CODE, FETCHED, FETCHED_IN_ROOT, fetched, folder, host_paths
from pdctl.spec.model import Host

GRACE_SECONDS = 30
# In dataDir, the folder of every deployment's bundle files (bundle_dir).
BUNDLE_ROOT = ".pdctl-bundles"


def deploy_dir(plan: Plan, host: Host) -> str:
    base = host.data_dir.rstrip("/")
    return f"{base}/{plan.name}"


def bundle_dir(name: str, host: Host) -> str:
    """Where `up --bundle` puts deployment `name`'s bundle files (wheels, weights) on a host:
    beside the deployment folder, not in it, so that `down` keeps them (as Kubernetes keeps
    the model's volume) and the next `up` copies nothing again; `down --delete-bundle` removes
    them (docs/offline.md)."""
    return f"{host.data_dir.rstrip('/')}/{BUNDLE_ROOT}/{name}"


def wheels_dir(plan: Plan, host: Host) -> str:
    """Where `up --bundle` puts the bundle's wheels on a host (docs/offline.md)."""
    return f"{bundle_dir(plan.name, host)}/wheels"


def find_links(plan: Plan, host: Host) -> str:
    """The folder a bundled plan's pip installs from with --no-index on host, else ''."""
    return wheels_dir(plan, host) if plan.bundled else ""


def start_env(unit: Unit) -> tuple[tuple[str, str], ...]:
    """The environment a process unit's start.sh exports: an engine gets HF_HOME (its cache)."""
    if unit.image is None and unit.role in ENGINE_ROLES:
        return (("HF_HOME", unit.host.hf_cache),) + unit.env
    return unit.env


def unit_hash(unit: Unit) -> str:
    """A short digest of everything that makes a unit what it is (for change detection): the
    final environment of its start script, and a container's cache mount."""
    cache = unit.host.hf_cache if unit.image is not None else None
    data: list[object] = [
        unit.command, start_env(unit), unit.image, unit.gpus, unit.publish, unit.setup, unit.port,
        cache,
    ]
    run = host_run(unit)
    if run is not None:  # only then: the hashes of other units stay as they were
        data.append(run.as_data())
    if unit.image is not None:  # a container: its restart policy and log rotation
        data.append(kept(unit.host).as_data())
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def header(plan: Plan, unit: Unit, what: str, digest: str | None = None) -> list[str]:
    """The comment lines atop a unit's scripts; `digest` is unit_hash(unit) when known."""
    return [
        f"Rendered by pdctl {__version__} from spec {plan.name!r} (phase {plan.phase}): "
        f"{what} {unit.name} ({unit.role}) on host {unit.host.name}.",
        "Do not edit: change the spec and render again.",
        f"pdctl-hash: {digest or unit_hash(unit)}",
    ]


def engine_setup(plan: Plan, host: Host) -> str:
    """Shell that prepares the engine's Python environment for the host's runtime."""
    rel = plan.release
    if host.runtime == "conda":
        return render_template(
            "setup-conda.sh.j2", conda_env=host.conda_env or f"pdctl-vllm-{rel.version}",
            package="vllm", version=rel.version, pip=rel.pip, find_links=find_links(plan, host),
        )
    if host.runtime == "venv":
        return render_template(
            "setup-venv.sh.j2", venv=host.venv or f"~/.pdctl/venv/vllm-{rel.version}",
            executable="vllm", install=plan.spec.engine.device == "cuda", pip=rel.pip,
            find_links=find_links(plan, host),
        )
    return ""


def adapter_fetch(plan: Plan, unit: Unit) -> str:
    """Shell that fetches the adapters pinned at a revision (templates/adapter-fetch.sh.j2)."""
    adapters = fetched(plan.spec.model.lora)
    if not adapters or unit.role not in ENGINE_ROLES:
        return ""
    return render_template(
        "adapter-fetch.sh.j2",
        adapters=[{"folder": folder(a), "hf": a.hf, "revision": a.revision} for a in adapters],
        image=unit.image, hf_cache=unit.host.hf_cache, code=FETCH_CODE,
        offline=plan.bundled,  # the bundle's copy (offline/ship.py) or one clear line
    )


def adapter_mounts(plan: Plan, unit: Unit, fetched_here: bool) -> tuple[Mount, ...]:
    """An engine container's adapters: the folder start.sh fetches pinned ones into, and the
    adapters given as host paths (read-only, at the same path)."""
    if unit.role not in ENGINE_ROLES:
        return ()
    out = [Mount(FETCHED, FETCHED_IN_ROOT, read_only=True)] if fetched_here else []
    return (*out, *(Mount(p, p, read_only=True) for p in host_paths(plan.spec.model.lora)))


def with_setup(plan: Plan, unit: Unit) -> Unit:
    if unit.image is not None:
        return unit
    return replace(unit, setup=engine_setup(plan, unit.host))


def unit_files(plan: Plan, unit: Unit, extra: tuple[Artifact, ...] = (),
               hashed: Unit | None = None) -> UnitFiles:
    """The unit with its start and stop scripts (and `extra` files beside them); `hashed`: the
    unit its change digest is taken of, where the start script runs a wrapper (`extra`) that
    holds the real command."""
    base = f"hosts/{unit.host.name}/{unit.name}"
    common = dict(
        deploy_dir=deploy_dir(plan, unit.host), unit=unit.name, port=unit.port,
        grace_seconds=GRACE_SECONDS, deployment=plan.name,
    )
    digest = unit_hash(hashed or unit)  # once per unit: it dumps and hashes the whole command
    box = None
    if unit.image is not None:
        folder = f"{deploy_dir(plan, unit.host)}/{unit.name}"
        secret_env = tuple(s.name for s in plan.secrets)
        fetch = adapter_fetch(plan, unit)
        adapters = adapter_mounts(plan, unit, bool(fetch))
        box = container(unit, digest, plan.name, folder, secret_env, model_dir(plan), adapters)
        start = render_template(
            "docker-start.sh.j2", c=box, hf_mount=HF_MOUNT,
            setup=slice_setup(unit),  # a HAMi-core slice's host-side checks, else ''
            header=header(plan, unit, "container", digest), fetch=fetch, **common,
        )
        stop = render_template(
            "docker-stop.sh.j2", header=header(plan, unit, "container", digest), **common
        )
    else:
        top = header(plan, unit, "process", digest)
        how = supervise_vars(plan, unit)
        start = render_template(
            "process-start.sh.j2", header=top, setup=unit.setup, fetch=adapter_fetch(plan, unit),
            env=start_env(unit), command=unit.command, **how, **common,
        )
        stop = render_template("process-stop.sh.j2", header=top, **how, **common)
        extra = supervise_files(plan, unit, top, common, start_env(unit)) + extra
    files = (
        Artifact(f"{base}/start.sh", start, executable=True),
        Artifact(f"{base}/stop.sh", stop, executable=True), *extra,
        *(Artifact(f"{base}/{name}", text) for name, text in unit.files),
    )
    return UnitFiles(unit, files, digest, script_digest(start), box)


def render_units(plan: Plan, units: Sequence[Unit]) -> list[UnitFiles]:
    return [unit_files(plan, unit) for unit in units]
