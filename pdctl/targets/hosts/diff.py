"""What `pdctl diff` shows for hosts: per unit that `up` would replace, the unified diff of
each of its files that differs from the copy in the unit's folder on the host (read over
SFTP; nothing is written). New units and units to stop have no diff: their line says so."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING

from pdctl.targets.state import CHANGED_STOPPED, Change

if TYPE_CHECKING:
    from pdctl.render.bundle import Artifact
    from pdctl.targets.hosts.remote import HostOps
    from pdctl.targets.state import Desired


def file_diff(old: str | None, new: str, running: str, wanted: str) -> str:
    """The unified diff turning `old` (None: missing on the host) into `new`."""
    before = [] if old is None else old.splitlines(True)
    after = new.splitlines(True)
    lines = difflib.unified_diff(before, after, running if old is not None else "/dev/null", wanted)
    out = "".join(lines)
    return out if out.endswith("\n") or not out else out + "\n"


def read_files(ops: HostOps, files: list[tuple[Artifact, str]]) -> dict[str, str | None]:
    """remote path -> its text (None when the host has no such file)."""
    out: dict[str, str | None] = {}
    with ops.sftp("reading the running scripts") as sftp:
        for _artifact, path in files:
            try:
                with sftp.open(path, "r") as fh:
                    out[path] = fh.read().decode("utf-8", "replace")
            except FileNotFoundError:
                out[path] = None
    return out


def script_diffs(
    ops_of: dict[str, HostOps], units: list[Desired], changes: list[Change]
) -> dict[tuple[str, str], str]:
    """(host, unit) -> the unified diff of its changed files, for every `restart` change and
    every `start` over changed scripts of a unit that is not running (CHANGED_STOPPED);
    `ops_of`: the connected hosts, `units`: the bundle's."""
    desired = {(d.host.name, d.name): d for d in units}
    out: dict[tuple[str, str], str] = {}
    for c in changes:
        d = desired.get((c.host, c.unit))
        changed = c.action == "restart" or (c.action == "start" and c.why == CHANGED_STOPPED)
        if not changed or d is None or c.host not in ops_of:
            continue
        ops = ops_of[c.host]
        prefix = f"hosts/{c.host}"
        paths = [(a, f"{ops.dir}/{a.path[len(prefix) :].lstrip('/')}") for a in d.files]
        found = read_files(ops, paths)
        text = ""
        for artifact, path in paths:
            if found[path] != artifact.text:
                text += file_diff(found[path], artifact.text, f"{c.host}:{path}", artifact.path)
        out[(c.host, c.unit)] = text
    return out
