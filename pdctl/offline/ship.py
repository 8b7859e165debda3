"""`up --bundle`: the bundle verified, the plan rendered to install from it, and its wheels
copied to each host over SSH (only the files a host lacks or holds with another sha256)."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

from pdctl.errors import PdctlError
from pdctl.offline import manifest as mf
from pdctl.offline.need import needs
from pdctl.plan.model import Plan
from pdctl.render import render
from pdctl.render.bundle import Bundle
from pdctl.render.host import wheels_dir
from pdctl.spec.model import Host
from pdctl.targets.ssh import Connection, SshOptions, makedirs

TMP = ".pdctl-tmp"


def bundled(plan: Plan, folder: Path) -> tuple[Plan, Bundle, mf.Manifest]:
    """The bundle checked before anything is copied or started (every file's size and sha256,
    and that it carries what this spec installs), and the plan rendered to install from it."""
    manifest = mf.verify(folder)
    mf.covers(manifest, {p for n in needs(plan) for p in n.pips}, folder)
    plan = replace(plan, bundled=True)
    return plan, render(plan), manifest


def hosts_of(plan: Plan) -> tuple[Host, ...]:
    """The hosts whose start scripts install from the bundle (engines and services)."""
    seen: dict[str, Host] = {}
    for unit in plan.units:
        if unit.image is None:
            seen.setdefault(unit.host.name, unit.host)
    return tuple(seen.values())


def remote_sums(conn: Connection, folder: str) -> dict[str, str]:
    """name -> sha256 of the files in a host's wheels folder (none when it is absent)."""
    cmd = (f"cd {shlex.quote(folder)} 2>/dev/null || exit 0; "
           "find . -maxdepth 1 -type f -exec sha256sum -- {} +")
    res = conn.run(cmd, step="hashing the bundle's wheels")
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


def ship_host(conn: Connection, plan: Plan, folder: Path, manifest: mf.Manifest) -> Shipped:
    """Copy one host's missing or differing wheels, check their sha256 there, and remove the
    files the manifest does not list (pip --find-links would see them)."""
    where = conn.expand(wheels_dir(plan, conn.host))
    have = remote_sums(conn, where)
    wanted = {e.path.removeprefix(f"{mf.WHEELS}/"): e for e in manifest.files}
    send = [e for name, e in wanted.items() if have.get(name) != e.sha256]
    extra = sorted(set(have) - set(wanted))
    sftp = conn.sftp("copying the bundle's wheels", timeout=300.0)
    try:
        makedirs(sftp, where, 0o700)
        for name in extra:
            sftp.remove(f"{where}/{name}")
        for e in send:
            name = e.path.removeprefix(f"{mf.WHEELS}/")
            sftp.put(str(folder / e.path), f"{where}/{name}{TMP}", confirm=True)
    except OSError as exc:
        raise PdctlError(f"{conn.where()}: copying the bundle's wheels to {where} failed: "
                         f"{exc}") from None
    finally:
        sftp.close()
    if send:  # each copy checked where it landed before it takes its name
        got = remote_sums(conn, where)
        for e in send:
            name = e.path.removeprefix(f"{mf.WHEELS}/")
            if got.get(name + TMP) != e.sha256:
                raise PdctlError(f"{conn.where()}: {where}/{name}: the copy's sha256 differs "
                                 f"from the bundle's; try again")
        moves = "; ".join(f"mv -f -- {shlex.quote(n + TMP)} {shlex.quote(n)}"
                          for n in (e.path.removeprefix(f"{mf.WHEELS}/") for e in send))
        res = conn.run(f"cd {shlex.quote(where)} && {moves}", step="placing the wheels")
        if res.rc != 0:
            raise PdctlError(f"{conn.where()}: placing the wheels failed: {res.err.strip()}")
    return Shipped(conn.host.name, len(send), sum(e.size for e in send), len(wanted) - len(send))


def ship(
    plan: Plan,
    folder: Path,
    manifest: mf.Manifest,
    options: SshOptions,
    parallel: int = 8,
    say: Callable[[str], None] = lambda _: None,
) -> list[Shipped]:
    """Every host's wheels, hosts in parallel; the first failure raised after all finish."""

    def one(host: Host) -> Shipped:
        conn = Connection(host, options).connect()
        try:
            done = ship_host(conn, plan, folder, manifest)
        finally:
            conn.close()
        say(f"{done.host}: {done.sent} wheels copied ({done.sent_bytes / 1e6:.1f} MB), "
            f"{done.kept} already there")
        return done

    hosts = hosts_of(plan)
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(hosts) or 1))) as pool:
        futures = [pool.submit(one, h) for h in hosts]
    return [f.result() for f in futures]
