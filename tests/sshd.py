"""The one factory of sshd test hosts of a test's own (the shared ones come from
tests/services.sh): a fresh host key, the test key authorized, on loopback or in a network
namespace of its own, optionally started through a wrapper (a mount namespace). Needs root."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import wait_port
from tests.targets.testbed import SshEnv, TestHost, free_port

# The settings of every test sshd, the shared hosts of tests/services.sh too.
CONF = (Path(__file__).parent / "sshd_config.in").read_text()


@dataclass
class Sshd:
    host: TestHost
    known_hosts: str  # a file: the shared test hosts' keys plus this one's
    proc: subprocess.Popen
    folder: Path
    host_line: str  # this host's own known_hosts entry ("[addr]:port key-type key\n")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)


def need_root(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if os.geteuid() != 0 or missing or not os.path.exists("/usr/sbin/sshd"):
        pytest.skip(f"needs root, sshd and {', '.join(tools)}")


def start_sshd(
    env: SshEnv,
    folder: Path,
    name: str,
    address: str = "127.0.0.1",
    netns: str | None = None,
    wrapper: tuple[str, ...] = (),
    extra: str = "",
) -> Sshd:
    """sshd for `name` on `address` (port 22 in `netns`, else a free loopback port), in
    `folder`/sshd-`name`, started as `wrapper + sshd ...`, with `extra` settings lines;
    returns once it listens."""
    d = folder / f"sshd-{name}"
    d.mkdir()
    keygen = ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(d / "host_key")]
    subprocess.run(keygen, check=True)
    shutil.copy(env.key + ".pub", d / "authorized_keys")
    port = 22 if netns else free_port(1)  # below the ephemeral range: no outgoing connection
    (d / "sshd.conf").write_text(
        CONF.format(
            port=port,
            address=address,
            hostkey=d / "host_key",
            pidfile=d / "sshd.pid",
            authorized=d / "authorized_keys",
        )
        + extra
    )
    key = " ".join((d / "host_key.pub").read_text().split()[:2])
    where = address if port == 22 else f"[{address}]:{port}"
    known = d / "known_hosts"
    own = f"{where} {key}\n"
    known.write_text(Path(env.known_hosts).read_text() + own)
    ns = ("ip", "netns", "exec", netns) if netns else ()
    proc = subprocess.Popen(
        [*ns, *wrapper, "/usr/sbin/sshd", "-D", "-e", "-f", str(d / "sshd.conf")],
        stdout=subprocess.DEVNULL,
        stderr=open(d / "sshd.log", "w"),  # noqa: SIM115 (closed with the process)
        start_new_session=True,
    )
    server = Sshd(TestHost(name, address, port), str(known), proc, d, own)
    try:
        wait_port(
            port,
            address,
            lambda: proc.poll() is None,
            f"sshd {name}",
            detail=(d / "sshd.log").read_text,
        )
    except BaseException:
        server.stop()
        raise
    return server


def make_netns(ns: str, net: str, route: bool = False) -> str:
    """Network namespace `ns` joined to this machine by a veth pair (this side `v<ns>`,
    `net`.1; the namespace's eth0 `net`.2, with a default route through `net`.1 if `route`).
    Returns the namespace's address."""
    veth, address = f"v{ns}", f"{net}.2"
    subprocess.run(["ip", "netns", "add", ns], check=True, capture_output=True)
    try:
        for cmd in [
            ["link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns],
            ["addr", "add", f"{net}.1/24", "dev", veth],
            ["link", "set", veth, "up"],
            ["-n", ns, "addr", "add", f"{address}/24", "dev", "eth0"],
            ["-n", ns, "link", "set", "eth0", "up"],
            ["-n", ns, "link", "set", "lo", "up"],
            *([["-n", ns, "route", "add", "default", "via", f"{net}.1"]] if route else []),
        ]:
            subprocess.run(["ip", *cmd], check=True, capture_output=True)
    except BaseException:
        remove_netns(ns)
        raise
    return address


def remove_netns(ns: str) -> None:
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    subprocess.run(["ip", "link", "del", f"v{ns}"], capture_output=True)


def reach_each_other(hosts: list[Sshd], netns: list[str]) -> None:
    """Until each namespace reaches the next one's sshd (the routes are up)."""
    for ns, other in zip(netns, hosts[1:] + hosts[:1], strict=True):
        wait_port(
            22, other.host.address, netns=ns, what=f"{other.host.address}:22 from {ns}", timeout=10
        )
