"""A test host of one's own for fault injection: an sshd in a fresh network namespace, joined
to this machine by a veth pair, so a test can take its link down or kill its sshd without
disturbing the shared test hosts (tests/services.sh). Needs root (`ip netns`)."""

from __future__ import annotations

import os
import signal
import subprocess
from dataclasses import dataclass
from itertools import count
from pathlib import Path

from tests.helpers import worker
from tests.sshd import make_netns, need_root, remove_netns, start_sshd
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
    k, n = worker()  # 10.77.200-249 shared out among pytest-xdist's workers
    for i in range(50 // n):
        net = f"10.77.{200 + k * (50 // n) + (os.getpid() + i) % (50 // n)}"
        if f"{net}.0/24" not in routes:
            return net
    raise RuntimeError("no free 10.77.x.0/24 subnet")


def start_fault_host(
    env: SshEnv, tmp: Path, name: str = "faulty", route: bool = False
) -> FaultHost:
    """`route`: the namespace's default route goes through this machine (to reach others)."""
    need_root("ip")
    ns = f"pdf{os.getpid() % 100000}x{next(_SEQ)}"
    address = make_netns(ns, _free_subnet(), route)
    try:
        sshd = start_sshd(env, tmp, ns, address, netns=ns)
    except BaseException:
        remove_netns(ns)
        raise
    return FaultHost(TestHost(name, address, 22), ns, f"v{ns}", sshd.known_hosts, sshd.proc)


def stop_fault_host(fault: FaultHost) -> None:
    subprocess.run(["ip", "link", "set", fault.veth, "up"], capture_output=True)
    if fault.sshd.poll() is None:
        fault.kill_sshd()
    remove_netns(fault.netns)
