"""A test host of one's own whose ~/.bashrc counts how often it is sourced: an sshd on a free
loopback port, in a mount namespace of its own where ~/.bashrc is bind-mounted to a file that
appends a line to a counter file. bash run by sshd sources ~/.bashrc once per exec channel
(sftp, `internal-sftp`, and port forwarding run no shell), so the counter counts the exec
channels pdctl opened. The shared test hosts and this machine's ~/.bashrc are untouched.
Needs root (mount namespaces)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.targets.testbed import SshEnv, TestHost, free_port


@dataclass
class CountingHost:
    host: TestHost
    known_hosts: str
    counter: Path
    sshd: subprocess.Popen

    def count(self) -> int:
        return len(self.counter.read_text().splitlines()) if self.counter.exists() else 0

    def reset(self) -> None:
        self.counter.write_text("")

    def stop(self) -> None:
        if self.sshd.poll() is None:
            os.killpg(self.sshd.pid, signal.SIGTERM)
            self.sshd.wait(timeout=10)


def start_counting_host(
    env: SshEnv, tmp: Path, name: str = "counted", slow: float = 0.0, rc_lines: str = ""
) -> CountingHost:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("a counting host needs root and unshare (a mount namespace)")
    d = tmp / f"sshd-{name}"
    d.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key")], check=True
    )
    shutil.copy(env.key + ".pub", d / "authorized_keys")
    port = free_port(1)  # below the ephemeral range: no outgoing connection takes it
    (d / "sshd.conf").write_text(
        f"Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n"
        f"AuthorizedKeysFile {d}/authorized_keys\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\n"
        "UsePAM no\nAllowTcpForwarding yes\nMaxSessions 64\nMaxStartups 64:30:128\n"
        "Subsystem sftp internal-sftp\n"
    )
    counter = d / "sourced"
    rc = d / "bashrc"
    sleep = f"sleep {slow}\n" if slow else ""
    rc.write_text(f'echo "$$" >> {counter}\n{sleep}{rc_lines}')
    home_rc = Path.home() / ".bashrc"
    if not home_rc.exists():
        pytest.skip(f"{home_rc} does not exist (needed as a bind-mount point)")
    known = d / "known_hosts"
    key = (d / "host_key.pub").read_text().split()[:2]
    known.write_text(f"[127.0.0.1]:{port} {key[0]} {key[1]}\n")
    sshd = subprocess.Popen(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f"mount --bind {rc} {home_rc} && exec /usr/sbin/sshd -D -e -f {d}/sshd.conf",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(d / "sshd.log", "w"),  # noqa: SIM115
        start_new_session=True,
    )
    # Until it listens: it either does or exits; 120 s only ends a hang (it listens in < 1 s).
    deadline = time.monotonic() + 120
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if sshd.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError((d / "sshd.log").read_text()) from None
            time.sleep(0.1)
    return CountingHost(TestHost(name, "127.0.0.1", port), str(known), counter, sshd)
