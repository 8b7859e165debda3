"""Preflight's I/O: run the topics' probe commands on one host, locally or over one SSH
connection, and collect the raw outputs: file name -> stdout, or `<name>.err` ('exit N' +
stderr) when a command fails; one command at a time for the probes that pair hosts."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field

from pdctl.errors import PdctlError, UsageError
from pdctl.preflight.facts import SSH
from pdctl.render.template import quote_path
from pdctl.spec.model import Host
from pdctl.targets.ssh import Connection, SshOptions

Step = Callable[[str, str], None]  # (host name, file name) after each command


@dataclass(frozen=True)
class Bounds:
    """How much one transfer of the network preflight may move and for how long
    (`--transfer-bytes`, `--transfer-seconds`)."""

    bytes: int = 256 << 20
    seconds: float = 5.0


@dataclass(frozen=True)
class Options:
    """How to gather: `ssh` reaches hosts (the same options as `up`), `local` names hosts
    probed on this machine without SSH, `concurrency` hosts at once (--parallel)."""

    ssh: SshOptions = field(default_factory=SshOptions)
    local: frozenset[str] = frozenset()
    remote_path: tuple[str, ...] = ()
    concurrency: int = 8
    timeout: float = 60.0
    kubeconfig: str | None = None
    context: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    transfer: Bounds | None = None  # the network preflight of phase 2 (None: not run)


def _record(raw: dict[str, str], name: str, rc: int, out: str, err: str) -> None:
    if rc == 0:
        raw[name] = out
    else:
        raw[name + ".err"] = f"exit {rc}\n{err.strip() or out.strip()}\n"


def run_local(
    name: str, cmds: dict[str, str], options: Options, step: Step | None
) -> dict[str, str]:
    """The commands on this machine."""
    raw: dict[str, str] = {}
    env = dict(os.environ)
    env.update(options.env)
    for file, cmd in cmds.items():
        try:
            proc = subprocess.run(  # noqa: S603 - a fixed command table, values quoted
                ["bash", "-c", prefix(options.remote_path) + cmd], capture_output=True, text=True,
                timeout=options.timeout, env=env)
            _record(raw, file, proc.returncode, proc.stdout, proc.stderr)
        except subprocess.TimeoutExpired:
            _record(raw, file, 124, "", f"timed out after {options.timeout:.0f}s")
        if step:
            step(name, file)
    return raw


def run_ssh(host, cmds: dict[str, str], options: Options, step: Step | None) -> dict[str, str]:
    """One connection to `host` and one exec channel for all commands (one script with framed
    outputs, pdctl.targets.batch: a slow ~/.bashrc is paid once). Connection failures (and
    refused host keys: the same rules as `up`, pdctl.targets.host_keys) are data; a usage
    error (a known_hosts line that does not parse, a missing identity file) is raised."""
    from pdctl.targets.batch import run_batch

    conn = Connection(host, options.ssh)
    try:
        conn.connect()
    except UsageError:
        raise
    except PdctlError as exc:
        if step:
            for file in cmds:
                step(host.name, file)
        return {SSH: str(exc) + "\n"}
    raw: dict[str, str] = {}
    files = list(cmds)

    def done(i: int, res: object) -> None:
        # a command that times out or whose channel breaks is recorded like any failure
        if isinstance(res, PdctlError):
            _record(raw, files[i], 255, "", f"{type(res).__name__}: {res}")
        else:
            _record(raw, files[i], res.rc, res.out, res.err)  # type: ignore[attr-defined]
        if step:
            step(host.name, files[i])

    try:
        run_batch(conn, [prefix(options.remote_path) + cmd for cmd in cmds.values()],
                  timeout=options.timeout, done=done)
    finally:
        conn.close()
    return raw


def prefix(path: tuple[str, ...] = ()) -> str:
    """What every command starts with: C locale, and extra PATH entries when asked."""
    text = "export LC_ALL=C; "
    if path:
        text += "export PATH=" + ":".join(quote_path(p) for p in path) + ':"$PATH"; '
    return text


def run_ssh_command(host: Host, command: str, options: Options, timeout: float) -> str:
    conn = Connection(host, options.ssh)
    try:
        conn.connect()
        res = conn.run(command, timeout=timeout)
    except PdctlError as exc:
        return f"error {exc}\n"
    finally:
        conn.close()
    return res.out + res.err


def run_local_command(command: str, timeout: float) -> str:
    try:
        proc = subprocess.run(  # noqa: S603 - fixed commands, values quoted
            ["bash", "-c", command], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"error timed out after {timeout:.0f}s\n"
    return proc.stdout + proc.stderr
