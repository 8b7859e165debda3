"""A test host of one's own for fault injection: an sshd in a fresh network namespace, joined
to this machine by a veth pair, so a test can take its link down or kill its sshd without
disturbing the shared test hosts (tests/services.sh). Needs root (`ip netns`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from itertools import count
from pathlib import Path

import pytest

from tests.targets.testbed import SshEnv, TestHost

_SEQ = count()


@dataclass
class FaultHost:
    host: TestHost
    netns: str
    veth: str  # the host side of the veth pair: `ip link set VETH down` cuts the link
    known_hosts: str  # the shared test hosts' keys plus this one's
    sshd: subprocess.Popen

    def link(self, up: bool) -> None:
        subprocess.run(["ip", "link", "set", self.veth, "up" if up else "down"], check=True)

    def kill_sshd(self) -> None:
        """SIGKILL this sshd and every sshd process it forked (the open sessions)."""
        for pid in [self.sshd.pid, *_descendants(self.sshd.pid, "sshd")]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.sshd.wait()


def _descendants(root: int, comm: str) -> list[int]:
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        parents[int(entry)], names[int(entry)] = ppid, name
    found, frontier = [], {root}
    while frontier:
        kids = {p for p, pp in parents.items() if pp in frontier}
        found.extend(p for p in kids if names[p] == comm)
        frontier = kids
    return found


def _free_subnet() -> str:
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    for i in range(50):
        net = f"10.77.{200 + (os.getpid() + i) % 50}"
        if f"{net}.0/24" not in routes:
            return net
    raise RuntimeError("no free 10.77.x.0/24 subnet")


def start_fault_host(env: SshEnv, tmp: Path, name: str = "faulty") -> FaultHost:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("fault hosts need root and iproute2 (ip netns)")
    ns = f"pdf{os.getpid() % 100000}x{next(_SEQ)}"
    veth = f"v{ns}"
    net = _free_subnet()
    address = f"{net}.2"
    d = tmp / f"sshd-{ns}"
    d.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key")], check=True
    )
    shutil.copy(env.key + ".pub", d / "authorized_keys")
    (d / "sshd.conf").write_text(
        f"Port 22\nListenAddress {address}\nHostKey {d}/host_key\nPidFile {d}/sshd.pid\n"
        f"AuthorizedKeysFile {d}/authorized_keys\nPasswordAuthentication no\n"
        "KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nStrictModes no\n"
        "UsePAM no\nAllowTcpForwarding yes\nMaxSessions 64\nMaxStartups 64:30:128\n"
        "Subsystem sftp internal-sftp\n"
    )
    known = d / "known_hosts"
    key = (d / "host_key.pub").read_text().split()[:2]
    known.write_text(Path(env.known_hosts).read_text() + f"{address} {key[0]} {key[1]}\n")
    ip = ["ip"]
    subprocess.run([*ip, "netns", "add", ns], check=True)
    try:
        subprocess.run(
            [*ip, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
            check=True,
        )
        subprocess.run([*ip, "addr", "add", f"{net}.1/24", "dev", veth], check=True)
        subprocess.run([*ip, "link", "set", veth, "up"], check=True)
        subprocess.run([*ip, "-n", ns, "addr", "add", f"{address}/24", "dev", "eth0"], check=True)
        subprocess.run([*ip, "-n", ns, "link", "set", "eth0", "up"], check=True)
        subprocess.run([*ip, "-n", ns, "link", "set", "lo", "up"], check=True)
        sshd = subprocess.Popen(
            ["ip", "netns", "exec", ns, "/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd.conf")],
            stdout=subprocess.DEVNULL,
            stderr=open(d / "sshd.log", "w"),
            start_new_session=True,
        )
    except BaseException:
        subprocess.run([*ip, "netns", "del", ns])
        raise
    fault = FaultHost(TestHost(name, address, 22), ns, veth, str(known), sshd)
    # Until it listens: it either does or exits; 120 s only ends a hang (it takes < 1 s).
    deadline = time.monotonic() + 120
    while True:
        probe = subprocess.run(["bash", "-c", f"echo > /dev/tcp/{address}/22"], capture_output=True)
        if probe.returncode == 0:
            break
        if sshd.poll() is not None or time.monotonic() > deadline:
            stop_fault_host(fault)
            raise RuntimeError(f"sshd in {ns} did not start: " + (d / "sshd.log").read_text())
        time.sleep(0.1)
    return fault


def stop_fault_host(fault: FaultHost) -> None:
    subprocess.run(["ip", "link", "set", fault.veth, "up"], capture_output=True)
    if fault.sshd.poll() is None:
        fault.kill_sshd()
    subprocess.run(["ip", "netns", "del", fault.netns], capture_output=True)
    subprocess.run(["ip", "link", "del", fault.veth], capture_output=True)
