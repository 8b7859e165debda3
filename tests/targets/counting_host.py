"""A test host of one's own whose ~/.bashrc counts how often it is sourced: an sshd on a free
loopback port, in a mount namespace of its own where ~/.bashrc is bind-mounted to a file that
appends a line to a counter file. bash run by sshd sources ~/.bashrc once per exec channel
(sftp, `internal-sftp`, and port forwarding run no shell), so the counter counts the exec
channels pdctl opened. The shared test hosts and this machine's ~/.bashrc are untouched.
Needs root (mount namespaces)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.sshd import Sshd, need_root, start_sshd
from tests.targets.testbed import SshEnv, TestHost


@dataclass
class CountingHost:
    host: TestHost
    known_hosts: str
    counter: Path
    sshd: Sshd

    def count(self) -> int:
        return len(self.counter.read_text().splitlines()) if self.counter.exists() else 0

    def reset(self) -> None:
        self.counter.write_text("")

    def stop(self) -> None:
        self.sshd.stop()


def start_counting_host(
    env: SshEnv, tmp: Path, name: str = "counted", slow: float = 0.0, rc_lines: str = ""
) -> CountingHost:
    need_root("unshare")
    home_rc = Path.home() / ".bashrc"
    if not home_rc.exists():
        pytest.skip(f"{home_rc} does not exist (needed as a bind-mount point)")
    counter, rc = tmp / f"{name}-sourced", tmp / f"{name}-bashrc"
    sleep = f"sleep {slow}\n" if slow else ""
    rc.write_text(f'echo "$$" >> {counter}\n{sleep}{rc_lines}')
    mount = f'mount --bind {rc} {home_rc} && exec "$0" "$@"'
    wrapper = ("unshare", "--mount", "--propagation", "private", "sh", "-c", mount)
    sshd = start_sshd(env, tmp, name, wrapper=wrapper)
    return CountingHost(sshd.host, sshd.known_hosts, counter, sshd)
