"""What a test run leaves behind: processes it started that still run, and network namespaces
it made that still exist. tests/conftest.py takes a snapshot when the session starts and fails
the run at its end when something of the session is left (and then stops it).

A process is the session's when it started after the snapshot and its command line or working
folder names one of the session's marks (its temporary folder, the repository's tests/): a
stand-in engine started over SSH on a namespace host is not a child of pytest, but it runs a
script of tests/ in a folder of tmp_path. Sessions of other checkouts (another tests/
folder, another basetemp) are not matched; two sessions of one checkout at the same time can
see each other's processes. A network namespace is the session's when it is
new and not a fault host of another process that still runs (tests/targets/faulthost.py names
those after the pid of the pytest process).
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
NETNS = Path("/run/netns")


@dataclass(frozen=True)
class Snapshot:
    pids: frozenset[int]
    netns: frozenset[str]
    ticks: int  # clock ticks since boot when it was taken (as /proc/PID/stat's starttime)


def _ticks_now() -> int:
    uptime = float((PROC / "uptime").read_text().split()[0])
    return int(uptime * os.sysconf("SC_CLK_TCK"))


def _pids() -> set[int]:
    return {int(p.name) for p in PROC.iterdir() if p.name.isdigit()}


def _netns() -> set[str]:
    return {p.name for p in NETNS.iterdir()} if NETNS.is_dir() else set()


def snapshot() -> Snapshot:
    return Snapshot(frozenset(_pids()), frozenset(_netns()), _ticks_now())


@dataclass(frozen=True)
class Process:
    pid: int
    cmdline: str
    cwd: str

    def __str__(self) -> str:
        return f"process {self.pid} ({self.cmdline[:160]}) in {self.cwd}"


def _process(pid: int, after: int) -> Process | None:
    """The process `pid` when it started after `after` (clock ticks) and is not a zombie."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        if fields[0] == "Z" or int(fields[19]) < after:
            return None
        raw = (PROC / str(pid) / "cmdline").read_bytes()
        cwd = os.readlink(PROC / str(pid) / "cwd")
    except (OSError, ValueError, IndexError):  # gone meanwhile, or not ours to read
        return None
    return Process(pid, raw.replace(b"\0", b" ").decode("utf-8", "replace").strip(), cwd)


def _ancestors() -> set[int]:
    """This process and its parents (pytest, and whatever started it)."""
    out, pid = set(), os.getpid()
    while pid > 1 and pid not in out:
        out.add(pid)
        try:
            stat = (PROC / str(pid) / "stat").read_text()
            pid = int(stat[stat.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError):
            break
    return out


def processes(before: Snapshot, marks: list[str]) -> list[Process]:
    """The processes started since `before` that still run and name one of `marks`."""
    mine = _ancestors()
    out = []
    for pid in sorted(_pids() - before.pids - mine):
        found = _process(pid, before.ticks)
        if found is None or not found.cmdline:  # kernel threads have no command line
            continue
        if any(m in found.cmdline or found.cwd.startswith(m) for m in marks):
            out.append(found)
    return out


def namespaces(before: Snapshot) -> list[str]:
    """The network namespaces made since `before` that still exist (not the fault hosts of
    another process that still runs: an ended xdist worker's are its controller's)."""
    theirs, others = re.compile(r"pdf(\d+)x"), {p % 100000 for p in _pids() - {os.getpid()}}
    return sorted(n for n in _netns() - before.netns
                  if not ((m := theirs.match(n)) and int(m[1]) in others))


def stop(found: list[Process]) -> None:
    """Stop what was left (SIGKILL: it outlived its test already)."""
    for p in found:
        try:
            os.kill(p.pid, signal.SIGKILL)
        except OSError:
            pass


def remove(names: list[str]) -> None:
    """Delete leftover network namespaces (their veth ends go with them)."""
    import subprocess

    for name in names:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
