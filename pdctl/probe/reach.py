"""Runs probe/group.py's reach probe on the hosts: over each host's SSH (one connection per
command), or on this machine for local hosts. I/O only."""

from __future__ import annotations

import subprocess
from collections.abc import Callable

from pdctl.facts.host import SSH
from pdctl.plan.model import Plan
from pdctl.probe.command import prefix
from pdctl.probe.group import reach
from pdctl.probe.run import Options
from pdctl.spec.model import Host


def reach_hosts(
    plan: Plan, options: Options, raw: dict[str, dict[str, str]], local: Callable[[Host], bool]
) -> dict[str, dict[str, str]]:
    """`reach` over the hosts' SSH (or locally for local hosts), skipping groups with a host
    that could not be reached at all (its ssh.err says why)."""
    down = {name for name, files in raw.items() if SSH in files}

    def run(host: Host, command: str, timeout: float) -> str:
        if host.name in down:
            return "error host unreachable over SSH\n"
        text = prefix(options.remote_path) + command
        if local(host):
            return run_local_command(text, timeout)
        return run_ssh_command(host, text, options, timeout)

    return reach(plan, run)


def run_ssh_command(host: Host, command: str, options: Options, timeout: float) -> str:
    from pdctl.errors import PdctlError
    from pdctl.targets.ssh import Connection

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
            ["bash", "-c", command], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return f"error timed out after {timeout:.0f}s\n"
    return proc.stdout + proc.stderr
