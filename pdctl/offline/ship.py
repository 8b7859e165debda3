"""`up --bundle`: the bundle verified, the plan rendered to install from it (and its engines
started from the bundle's weights), and its wheels and weights copied to each host over SSH
(only the files a host lacks or holds with another sha256)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from pdctl.errors import PdctlError
from pdctl.offline import adapters
from pdctl.offline import manifest as mf
from pdctl.offline.need import needs
from pdctl.plan.model import ENGINE_ROLES, Plan
from pdctl.plan.units import container_images, engine_hosts, process_hosts
from pdctl.render import render
from pdctl.render.bundle import Bundle
from pdctl.render.host import BUNDLE_ROOT, bundle_dir, deploy_dir, wheels_dir
from pdctl.spec.lora import FETCHED
from pdctl.spec.model import Host
from pdctl.targets.ssh import Connection, SshOptions, makedirs

TMP = ".pdctl-tmp"
# The engines never ask the Hub (https://huggingface.co/docs/huggingface_hub/package_reference/
# environment_variables#hfhuboffline).
OFFLINE_ENV = ("HF_HUB_OFFLINE", "1")


def from_unit(name: str) -> str:
    """The bundle's weights of deployment `name` (weights_dir) as its engines reach them: an
    engine starts in its unit's folder (<dataDir>/<name>/<unit>: templates/process-start.sh.j2
    `cd "$unit_dir"`), so this path is right on every host, whatever its dataDir (a `~/` one
    included)."""
    return f"../../{BUNDLE_ROOT}/{name}/{mf.WEIGHTS}"


def weights_dir(plan: Plan, host: Host) -> str:
    """Where `up --bundle` puts the bundle's weights on a host."""
    return f"{bundle_dir(plan.name, host)}/{mf.WEIGHTS}"


def point(command: tuple[str, ...], model: str, served: str, weights: str) -> tuple[str, ...]:
    """`vllm serve MODEL ...` made `vllm serve WEIGHTS --served-model-name SERVED ...`
    (the group guard's wrapper kept)."""
    cmd = list(command)
    for i in range(len(cmd) - 2):
        if cmd[i:i + 2] == ["vllm", "serve"] and cmd[i + 2] == model:
            cmd[i + 2] = weights
            if "--served-model-name" not in cmd[i + 3:]:
                cmd[i + 3:i + 3] = ["--served-model-name", served]
            return tuple(cmd)
    raise PdctlError(f"cannot point {' '.join(command[:4])} ... at the bundle's weights")


def from_weights(plan: Plan) -> Plan:
    """The engines started from the bundle's weights, served under the same name."""
    units = []
    for u in plan.units:
        if u.role in ENGINE_ROLES and u.image is None:
            env = u.env if OFFLINE_ENV[0] in dict(u.env) else (*u.env, OFFLINE_ENV)
            u = replace(u, command=point(u.command, plan.spec.model.name, plan.served_name,
                                         from_unit(plan.name)), env=env)
        units.append(u)
    return replace(plan, units=tuple(units))


def bundled(plan: Plan, folder: Path) -> tuple[Plan, Bundle, mf.Manifest]:
    """The bundle checked before anything is copied or started (every file's size and sha256,
    and that it carries what this spec installs), and the plan rendered to install from it."""
    from pdctl.offline.images import refs

    refuse_kubernetes(plan, folder)
    manifest = mf.verify(folder)
    found = needs(plan, weights=bool(manifest.weights), images=bool(manifest.images),
                  adapters=bool(manifest.part(mf.ADAPTERS)))
    mf.covers(manifest, {p for n in found for p in n.pips}, folder, refs(plan))
    adapters.covers(plan, manifest, folder)
    plan = bundled_plan(plan, manifest)
    return plan, render(plan), manifest


def installed_from(plan: Plan, folder: Path) -> Plan:
    """The plan as `up --bundle DIR` made it, from DIR's manifest alone (no file hashed):
    what `status`, `diff` and `restart --bundle DIR` hold the hosts against."""
    refuse_kubernetes(plan, folder)
    return bundled_plan(plan, mf.read(folder))


def bundled_plan(plan: Plan, manifest: mf.Manifest) -> Plan:
    """The plan that installs from the bundle (and, when it carries weights, starts its engines
    from them): the start scripts depend on the manifest only through these two."""
    plan = replace(plan, bundled=True)
    return from_weights(plan) if manifest.weights else plan


def refuse_kubernetes(plan: Plan, folder: Path) -> None:
    if plan.on_kubernetes:
        raise mf.BundleError(
            "--bundle: a Kubernetes cluster pulls its images; nothing is copied to it",
            fix=f"push them to your mirror with `sh {folder}/images/mirror.sh HOST[:PORT]` and "
            "set kubernetes.imageMirror (docs/offline.md)")


def remote_sums(conn: Connection, folder: str, depth: str = "-maxdepth 1 ") -> dict[str, str]:
    """path -> sha256 of the files in a host's wheels (weights: depth "") folder (none when it
    is absent)."""
    cmd = (f"cd {shlex.quote(folder)} 2>/dev/null || exit 0; "
           f"find . {depth}-type f -exec sha256sum -- {{}} +")
    res = conn.run(cmd, step="hashing the bundle's files")
    if res.rc != 0:
        raise PdctlError(f"{conn.where()}: hashing {folder} failed: {res.err.strip()[-200:]}")
    out = {}
    for line in res.out.splitlines():
        digest, _, name = line.partition("  ")
        out[name.removeprefix("./")] = digest
    return out


@dataclass
class Shipped:
    host: str
    sent: int  # files copied
    sent_bytes: int
    kept: int  # files already there with the right sha256
    weights_sent: int = 0  # of the weights' files (in sent and sent_bytes too)
    adapters_sent: int = 0  # of the LoRA adapters' files (in sent and sent_bytes too)
    loaded: tuple[str, ...] = ()  # images copied and loaded (their tars in sent too)
    had: tuple[str, ...] = ()  # images the host had already (same image id)


def sync(conn: Connection, where: str, wanted: dict[str, mf.Entry], folder: Path,
         top: str) -> tuple[list[mf.Entry], int]:
    """Make the host's folder `where` hold exactly `wanted` (path below it -> entry): copy what
    it lacks or holds with another sha256 (each copy checked there before it takes its name),
    remove the rest. Returns (the entries sent, how many were kept)."""
    depth = "-maxdepth 1 " if top == mf.WHEELS else ""
    have = remote_sums(conn, where, depth)
    send = [e for name, e in wanted.items() if have.get(name) != e.sha256]
    extra = sorted(set(have) - set(wanted))
    sftp = conn.sftp(f"copying the bundle's {top}", timeout=300.0)
    try:
        makedirs(sftp, where, 0o700)
        for name in extra:
            sftp.remove(f"{where}/{name}")
        for name, e in wanted.items():
            if e in send:
                if "/" in name:
                    makedirs(sftp, f"{where}/{name.rsplit('/', 1)[0]}", 0o700)
                sftp.put(str(folder / e.path), f"{where}/{name}{TMP}", confirm=True)
    except OSError as exc:
        raise PdctlError(f"{conn.where()}: copying the bundle's {top} to {where} failed: "
                         f"{exc}") from None
    finally:
        sftp.close()
    if send:
        got = remote_sums(conn, where, depth)
        names = [n for n, e in wanted.items() if e in send]
        for name in names:
            if got.get(name + TMP) != wanted[name].sha256:
                raise PdctlError(f"{conn.where()}: {where}/{name}: the copy's sha256 differs "
                                 f"from the bundle's; try again")
        moves = "; ".join(f"mv -f -- {shlex.quote(n + TMP)} {shlex.quote(n)}" for n in names)
        res = conn.run(f"cd {shlex.quote(where)} && {moves}", step=f"placing the {top}")
        if res.rc != 0:
            raise PdctlError(f"{conn.where()}: placing the {top} failed: {res.err.strip()}")
    return send, len(wanted) - len(send)


def ship_host(conn: Connection, plan: Plan, folder: Path, manifest: mf.Manifest) -> Shipped:
    """Copy one host's missing or differing wheels (and the weights to an engine host), and
    remove the files the manifest does not list (pip --find-links would see them)."""
    send: list[mf.Entry] = []
    kept = 0
    if conn.host.name in {h.name for h in process_hosts(plan)}:
        where = conn.expand(wheels_dir(plan, conn.host))
        send, kept = sync(conn, where, manifest.part(mf.WHEELS), folder, mf.WHEELS)
    heavy: list[mf.Entry] = []
    if manifest.weights and conn.host.name in engine_hosts(plan):
        there = conn.expand(weights_dir(plan, conn.host))
        heavy, more = sync(conn, there, manifest.part(mf.WEIGHTS), folder, mf.WEIGHTS)
        kept += more
    lora, more = ship_adapters(conn, plan, folder, manifest)
    tars, loaded, had = load_images(conn, plan, folder, manifest)
    sent = send + heavy + lora + tars
    return Shipped(conn.host.name, len(sent), sum(e.size for e in sent), kept + more,
                   len(heavy), len(lora), loaded, had)


def ship_adapters(conn: Connection, plan: Plan, folder_: Path, manifest: mf.Manifest
                  ) -> tuple[list[mf.Entry], int]:
    """The adapters into the host's ~/.cache/pdctl-adapters/<folder> (only what it lacks or
    holds with another sha256), each with the revision marker the start script checks."""
    if conn.host.name not in {u.host.name for u in plan.units if u.role in ENGINE_ROLES}:
        return [], 0
    files = manifest.part(mf.ADAPTERS)
    sent: list[mf.Entry] = []
    kept = 0
    for name, (_, revision) in adapters.pinned(plan).items():
        where = conn.expand(f"{FETCHED}/{name}")
        mine = {p.split("/", 1)[1]: e for p, e in files.items() if p.split("/", 1)[0] == name}
        got, more = sync(conn, where, mine, folder_, mf.ADAPTERS)
        sent, kept = sent + got, kept + more
        mark = f"printf %s {shlex.quote(revision)} > {shlex.quote(where + '/.pdctl-revision')}"
        res = conn.run(mark, step=f"marking LoRA adapter {name}")
        if res.rc != 0:
            raise PdctlError(f"{conn.where()}: writing {where}/.pdctl-revision failed: "
                             f"{res.err.strip()[-200:]}")
    return sent, kept


def load_images(conn: Connection, plan: Plan, folder: Path, manifest: mf.Manifest
                ) -> tuple[list[mf.Entry], tuple[str, ...], tuple[str, ...]]:
    """The images this host's containers run: asked for their id first; only where it differs
    the tar is copied (checked by sha256 there) and `docker load`ed, then removed."""
    from pdctl.offline.images import inspect_command, load_command

    files = {e.path: e for e in manifest.files}
    sent: list[mf.Entry] = []
    loaded: list[str] = []
    had: list[str] = []
    mine = container_images(plan).get(conn.host.name, ())
    for ref, image_id, file in manifest.images:
        if ref not in mine:
            continue
        res = conn.run(inspect_command(ref), step=f"asking for image {ref}")
        if res.out.strip() == image_id:
            had.append(ref)
            continue
        where = conn.expand(f"{deploy_dir(plan, conn.host)}/{mf.IMAGES}")
        name = file.removeprefix(f"{mf.IMAGES}/")
        got, _ = sync(conn, where, {name: files[file]}, folder, mf.IMAGES)
        sent += got
        res = conn.run(load_command(f"{where}/{name}", ref), step=f"loading image {ref}")
        if res.rc != 0 or res.out.strip().splitlines()[-1:] != [image_id]:
            raise PdctlError(f"{conn.where()}: docker load of {ref} failed: "
                             f"{(res.err or res.out).strip()[-300:]}")
        loaded.append(ref)
    return sent, tuple(loaded), tuple(had)


def ship(
    plan: Plan,
    folder: Path,
    manifest: mf.Manifest,
    options: SshOptions,
    parallel: int = 8,
    say: Callable[[str], None] = lambda _: None,
    only: set[str] | None = None,
) -> list[Shipped]:
    """Every host's wheels (of the hosts named in `only`, where given), hosts in parallel; the
    first failure raised after all finish."""

    def one(host: Host) -> Shipped:
        conn = Connection(host, options).connect()
        try:
            done = ship_host(conn, plan, folder, manifest)
        finally:
            conn.close()
        wheels = done.sent - done.weights_sent - done.adapters_sent - len(done.loaded)
        say(f"{done.host}: {wheels} wheels and {done.weights_sent} weights files copied"
            + (f", {done.adapters_sent} LoRA adapter files" if done.adapters_sent else "")
            + f" ({done.sent_bytes / 1e6:.1f} MB), {done.kept} already there"
            + (f"; images loaded: {', '.join(done.loaded)}" if done.loaded else "")
            + (f"; images already there: {', '.join(done.had)}" if done.had else ""))
        return done

    images = container_images(plan)
    docker = [u.host for u in plan.units if u.host.name in images]
    hosts = tuple(h for h in {h.name: h for h in (*process_hosts(plan), *docker)}.values()
                  if only is None or h.name in only)
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts) or 1))) as pool:
        futures = [pool.submit(one, h) for h in hosts]
    return [f.result() for f in futures]


Loader = Callable[[dict[str, int]], tuple[Plan, Bundle]]  # role -> count (pdctl.scale.Load)


def scaled_from(load: Loader, deployed: Plan, folder: Path, options: SshOptions,
                parallel: int, say: Callable[[str], None]
                ) -> tuple[Loader, Callable[[Plan, set[str]], None]]:
    """`scale` and `autoscale --bundle DIR`: `load` rendered to install from the bundle (checked
    once, as `up --bundle` checks it, against the spec as `deployed`), and what copies its files
    to the hosts where a scaled plan starts new instances, before they start (only what a host
    lacks or holds with another sha256)."""
    _, _, manifest = bundled(deployed, folder)

    def load_bundled(counts: dict[str, int]) -> tuple[Plan, Bundle]:
        plan = bundled_plan(load(counts)[0], manifest)
        return plan, render(plan)

    def prepare(plan: Plan, hosts: set[str]) -> None:
        ship(plan, folder, manifest, options, parallel, say, only=hosts)

    return load_bundled, prepare
