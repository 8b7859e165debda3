"""`down` on SSH hosts, under the run lock (run_lock.py): per host, ONE exec runs each unit's
stop.sh (router first, then engines, then stores) and removes the folder of each unit it
stopped; the deployment folder (with the lock file, and the data folder when that leaves it
empty) goes only when no unit is left. A unit whose stop.sh fails is NOT stopped: its folder
stays, with the deployment folder, so that a later `down` retries it. The files `up --bundle`
copied (render.host.bundle_dir) stay unless asked (`--delete-bundle`), and then go only with
the deployment folder."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pdctl.errors import PdctlError
from pdctl.render.host import bundle_dir
from pdctl.targets.base import Stopped
from pdctl.targets.batch import run_batch
from pdctl.targets.hosts.run_lock import lock_path
from pdctl.targets.outcome import last_line
from pdctl.targets.ssh import HostLost

if TYPE_CHECKING:
    from pdctl.targets.hosts.fleet import Fleet
    from pdctl.targets.hosts.remote import HostOps
    from pdctl.targets.state import Desired, Observed


@dataclass
class Removal:
    """What `down` did on one host: units whose stop.sh failed (unit -> its last line), the
    deployment folder: `removed`, `absent` (there was none) or `kept` (a unit failed); the
    bundle folder (held()): None when there is none."""

    failed: dict[str, str] = field(default_factory=dict)
    folder: str = "kept"
    bundle: str | None = None


def remove_folder_command(ops: HostOps, data_dir: str, bundle: str, delete: bool) -> str:
    """Unless a unit folder is left: remove the deployment folder, then (down holds it) the
    run lock's file; the bundle folder `bundle` with `delete` (prints `bundle removed`), else
    its size (`bundle KIB`); the data folder when that leaves it empty. Prints `absent` when
    there was no deployment folder."""
    base = ops.conn.expand(data_dir).rstrip("/")
    folder = shlex.quote(ops.dir)
    expanded = ops.conn.expand(bundle)
    there, root = shlex.quote(expanded), shlex.quote(expanded.rsplit("/", 1)[0])
    keep = (f"if e=$(rm -rf -- {there} 2>&1); then echo 'bundle removed'; "
            'else echo "bundle failed $(printf \'%s\\n\' "$e" | tail -n 1)"; fi; '
            f"rmdir -- {root} 2>/dev/null; " if delete else size_line(there) + "; ")
    return (
        f'for u in {folder}/*/; do [ -f "$u/stop.sh" ] && exit 0; done; '
        f"[ -d {folder} ] || echo absent; rm -rf -- {folder}; "
        f"rm -f -- {shlex.quote(lock_path(ops.dir))}; "
        f"if [ -d {there} ]; then {keep}fi; "
        f"rmdir -- {shlex.quote(base)} 2>/dev/null || true"
    )


def held(text: str) -> str | None:
    """The bundle folder from remove_folder_command's or kept_command's output: the KiB it
    holds ("" when du could not say), `removed`, `failed <why>`; None when there is none."""
    for line in text.splitlines():
        key, _, rest = line.partition(" ")
        if key == "bundle":
            rest = rest.strip()
            return rest if rest.isdigit() or rest == "removed" or rest.startswith("failed") else ""
    return None


def size_line(there: str) -> str:
    """Shell: `bundle KIB` of the (quoted) folder `there`; `bundle ` when du cannot say."""
    return f'echo "bundle $(du -sk -- {there} 2>/dev/null | cut -f1)"'


def kept_command(ops: HostOps, bundle: str) -> str:
    """`bundle KIB` when the bundle folder is there (down --dry-run reads only)."""
    there = shlex.quote(ops.conn.expand(bundle))
    return f"if [ -d {there} ]; then {size_line(there)}; fi"


def stop_and_remove(ops: HostOps, units: list[str], data_dir: str, bundle: str,
                    delete: bool) -> Removal:
    """`down` on one host in ONE exec (see the module docstring); HostLost when the
    connection dies, before or meanwhile."""
    ops.forget()
    cmds = []
    for unit in units:
        script = shlex.quote(ops.unit_dir(unit) + "/stop.sh")
        folder = shlex.quote(ops.unit_dir(unit))
        cmds.append(f"if [ -f {script} ]; then bash {script} || exit; fi; rm -rf -- {folder}")
    cmds.append(remove_folder_command(ops, data_dir, bundle, delete))
    step = ("stopping " + ", ".join(units)) if units else "removing the deployment folder"
    results = run_batch(ops.conn, cmds, timeout=600, step=step)
    out = Removal()
    for unit, res in zip(units, results, strict=False):
        if isinstance(res, HostLost):
            raise res
        if isinstance(res, PdctlError):  # past its timeout: no answer from stop.sh
            out.failed[unit] = res.line()
        elif res.rc != 0:
            why = last_line(res.err) or last_line(res.out)
            out.failed[unit] = why or f"exit status {res.rc}"
    last = results[-1]
    if isinstance(last, PdctlError):
        raise last
    if not out.failed:
        out.folder = "absent" if "absent" in last.out.split() else "removed"
        out.bundle = held(last.out)
    return out


def down(fleet: Fleet, desired: list[Desired], name: str, delete_bundle: bool = False
         ) -> Stopped:
    """Stop every unit in the deployment folder of every reachable host, under the run lock.
    Each unit is `stopped`, `was not running`, or `NOT stopped` (its stop.sh failed: then a
    PdctlError line, after the others are done). Hosts that cannot be reached (or are lost
    meanwhile) are in the answer's `unreachable`, with the spec's units (`desired`) on each in
    `left`; `folders`: what became of each host's deployment folder (`removed`, `absent`:
    there was none, `kept`: a unit is left); `bundles`: each host's bundle folder, kept or
    (`delete_bundle`) removed, Stopped.bundles. `name`: the deployment's."""
    fleet.connect(tolerate=True)
    stage = {(d.host.name, d.name): d.stage for d in desired}
    seen: dict[str, list[Observed]] = {}
    for obs in fleet.lock(tolerate=True):
        seen.setdefault(obs.host, []).append(obs)

    def one(ops: HostOps) -> tuple[list[Observed], Removal] | None:
        # Reverse start order: the router before the engines, stores last.
        found = sorted(
            seen.get(ops.name, []), key=lambda o: (-stage.get((o.host, o.name), 1), o.name)
        )
        try:
            host = ops.conn.host
            return found, stop_and_remove(ops, [o.name for o in found], host.data_dir,
                                          bundle_dir(name, host), delete_bundle)
        except HostLost as exc:
            fleet.unreachable[ops.name] = exc.line()
            return None

    out = Stopped()
    failed: list[str] = []
    lines: list[tuple[bool, str]] = []  # (a `stopped` line, which the CLI prints itself; line)
    reached = fleet.reachable()
    for ops, res in zip(reached, fleet.map(one, reached), strict=True):
        if res is None:
            continue
        found, removal = res
        for obs in found:
            if obs.name in removal.failed:
                why = removal.failed[obs.name]
                failed.append(f"NOT stopped: {obs.name} on {ops.name} ({why})")
                lines.append((False, failed[-1]))
            elif obs.running:
                out.removed.append((ops.name, obs.name))
                lines.append((True, f"stopped {obs.name} on {ops.name}"))
            else:
                lines.append((False, f"{obs.name} on {ops.name} was not running"))
        out.folders[ops.name] = removal.folder
        if removal.bundle is not None:
            out.bundles[ops.name] = (bundle_dir(name, ops.conn.host), removal.bundle)
        if removal.folder == "absent":
            lines.append((False, f"no deployment folder of {name!r} on {ops.name}"))
        elif removal.folder == "kept":
            lines.append((False, f"kept the deployment folder {ops.dir} on {ops.name}"))
    for printed, line in lines:
        if failed or not printed:  # with a failure the CLI prints no line of its own
            fleet.say(line)
    out.unreachable = dict(sorted(fleet.unreachable.items()))
    out.left = {host: [d.name for d in desired if d.host.name == host] for host in out.unreachable}
    if failed:
        lost = [f"{h} not reached ({why})" for h, why in out.unreachable.items()]
        raise PdctlError(
            "down did not stop everything: "
            + "; ".join(failed + lost)
            + "; what is NOT stopped keeps its folder: run `pdctl down` again once its "
            "stop.sh works"
        )
    return out
