"""Fleet benchmark: `pdctl up` and `pdctl preflight` against 1 and against 8 real SSH hosts.

The hosts are real sshd daemons this module starts (by PID, stopped at the end), each in a
network namespace of its own: every host then has its own 127.0.0.1, so the 8 stand-in
engines can all listen on the spec's one port and pdctl's port-forwarded health probes
reach the right one, as on 8 machines. (Loopback addresses alone would make the 8 engines
share one port.) Needs root, /usr/sbin/sshd, ssh-keygen and `ip netns`.

The engine is tests/targets/fake_vllm.py (answers /health and /v1/models at once), put
into a prepared venv, so the figures are pdctl's own work: SSH connections, upload, start
scripts and the health wait.
"""

from __future__ import annotations

import getpass
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import timing
import yaml

HERE = Path(__file__).resolve().parent
SIZES = (1, 8)
SSH_PORT = 2222
ENGINE_PORT = 8000
PREFIX = "pdctl-bench"  # namespaces pdctl-bench-1.., host-side veths vpdctl-bench-1..


@dataclass(frozen=True)
class BenchHost:
    index: int

    @property
    def name(self) -> str:
        return f"bench{self.index}"

    @property
    def ns(self) -> str:
        return f"{PREFIX}-{self.index}"

    @property
    def veth(self) -> str:
        return f"v{PREFIX}-{self.index}"[:15]

    @property
    def address(self) -> str:
        return f"10.78.{self.index}.2"

    @property
    def gateway(self) -> str:
        return f"10.78.{self.index}.1"


@dataclass
class Fleet:
    """N sshd hosts in network namespaces, a client key and a known_hosts file."""

    root: Path
    count: int
    # bash run by sshd sources ~/.bashrc for every command; this machine's root .bashrc runs
    # `pyenv init` (~0.1 s of CPU each time). With plain_shell the hosts see an empty one,
    # as on a host without such a file.
    plain_shell: bool = True
    # The ~/.bashrc the hosts see instead (e.g. `sleep 0.3`, a conda init's cost); None: as
    # plain_shell says.
    bashrc: str | None = None
    hosts: list[BenchHost] = field(default_factory=list)
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def key(self) -> Path:
        return self.root / "client_key"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    def __enter__(self) -> Fleet:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key))
        (self.root / "authorized_keys").write_text(Path(f"{self.key}.pub").read_text())
        os.chmod(self.root / "authorized_keys", 0o600)
        known = []
        for i in range(1, self.count + 1):
            host = BenchHost(i)
            self._network(host)
            hostkey = self.root / f"host_{host.name}"
            _run("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey))
            conf = self.root / f"sshd_{host.name}.conf"
            conf.write_text(
                f"Port {SSH_PORT}\nListenAddress {host.address}\nHostKey {hostkey}\n"
                f"PidFile {self.root}/sshd_{host.name}.pid\n"
                f"AuthorizedKeysFile {self.root}/authorized_keys\n"
                "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                "PermitRootLogin prohibit-password\nStrictModes no\nUsePAM no\n"
                "AllowTcpForwarding yes\nMaxSessions 64\nMaxStartups 64:30:128\n"
                "Subsystem sftp internal-sftp\n"
            )
            log = open(self.root / f"sshd_{host.name}.log", "wb")  # noqa: SIM115
            sshd = f"exec /usr/sbin/sshd -D -e -f {shlex.quote(str(conf))}"
            rc = Path.home() / ".bashrc"
            text = self.bashrc if self.bashrc is not None else ("" if self.plain_shell else None)
            if text is not None and rc.exists():
                # A mount namespace of its own where ~/.bashrc is `text`: see plain_shell.
                seen = self.root / "host_bashrc"
                seen.write_text(text)
                sshd = f"mount --bind {shlex.quote(str(seen))} {shlex.quote(str(rc))} && {sshd}"
            self.procs.append(
                subprocess.Popen(
                    [
                        "ip",
                        "netns",
                        "exec",
                        host.ns,
                        "unshare",
                        "--mount",
                        "--propagation",
                        "private",
                        "sh",
                        "-c",
                        sshd,
                    ],
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            )
            pub = Path(f"{hostkey}.pub").read_text().split()[:2]
            known.append(f"[{host.address}]:{SSH_PORT} {' '.join(pub)}")
            self.hosts.append(host)
        self.known_hosts.write_text("\n".join(known) + "\n")
        for host in self.hosts:
            _wait_tcp(host.address, SSH_PORT, 15)

    def _network(self, host: BenchHost) -> None:
        _cleanup_network(host)
        _run("ip", "netns", "add", host.ns)
        _run(
            "ip", "link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.ns
        )
        _run("ip", "addr", "add", f"{host.gateway}/24", "dev", host.veth)
        _run("ip", "link", "set", host.veth, "up")
        _run("ip", "-n", host.ns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        _run("ip", "-n", host.ns, "link", "set", "eth0", "up")
        _run("ip", "-n", host.ns, "link", "set", "lo", "up")

    def stop(self) -> None:
        """Stop the sshd daemons this fleet started (by PID), then its namespaces."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()
        for host in self.hosts:
            _cleanup_network(host)
        self.hosts.clear()


def stop_leftovers(folder: Path) -> list[int]:
    """Stop processes working under `folder` (stand-in engines a failed `pdctl down` left
    behind: start.sh runs each unit from its folder), by PID. Returns their PIDs."""
    found = []
    prefix = str(folder.resolve())
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd == prefix or cwd.startswith(prefix + "/"):
            found.append(int(pid))
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return found


def _cleanup_network(host: BenchHost) -> None:
    subprocess.run(["ip", "netns", "del", host.ns], capture_output=True)
    subprocess.run(["ip", "link", "del", host.veth], capture_output=True)


def _run(*argv: str) -> None:
    proc = subprocess.run(list(argv), capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")


def _wait_tcp(address: str, port: int, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            with socket.create_connection((address, port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"sshd on {address}:{port} did not come up") from None
            time.sleep(0.1)


def stand_in_venv(root: Path) -> Path:
    """A 'Python environment' whose bin/vllm is the stand-in engine."""
    venv = root / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    exe = venv / "bin" / "vllm"
    # The tests' stand-in engine (the same program `tests/targets` deploys).
    body = (HERE.parent / "tests" / "targets" / "fake_vllm.py").read_text()
    exe.write_text(f"#!{sys.executable}\n{body}")
    exe.chmod(0o755)
    python = venv / "bin" / "python"  # preflight checks the environment has a Python
    if not python.exists():
        python.symlink_to(sys.executable)
    return venv


def fleet_spec(fleet: Fleet, hosts: int, venv: Path, data: Path) -> dict:
    return {
        "name": "fleet",
        "phase": 0,
        "model": {"name": "stand-in", "servedName": "stand-in"},
        "engine": {"device": "cpu"},
        "hosts": [
            {
                "name": h.name,
                "address": h.address,
                "port": SSH_PORT,
                "user": getpass.getuser(),
                "identityFile": str(fleet.key),
                "runtime": "venv",
                "venv": str(venv),
                "dataDir": str(data / h.name),
            }
            for h in fleet.hosts[:hosts]
        ],
        "serve": {"replicas": hosts, "port": ENGINE_PORT},
    }


@dataclass(frozen=True)
class Sample:
    """One timed command: wall seconds, CPU seconds of pdctl itself, CPU seconds of the
    sshd side (every session's shell and commands, from the sshd daemons' reaped children)."""

    wall: float
    client_cpu: float
    server_cpu: float


@dataclass
class FleetResult:
    # (command, hosts) -> samples; commands "up", "preflight" and "preflight+bashrc"
    runs: dict[tuple[str, int], list[Sample]] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)  # command -> why not measured
    notes: list[str] = field(default_factory=list)

    def stats(self, command: str) -> dict[int, timing.Stats]:
        return {
            n: timing.Stats(tuple(s.wall for s in samples))
            for (cmd, n), samples in self.runs.items()
            if cmd == command and samples
        }


def commands(pdctl: str) -> set[str]:
    """The command names `pdctl --help` lists."""
    out = subprocess.run([pdctl, "--help"], capture_output=True, text=True).stdout
    listed = out.partition("Commands:")[2].splitlines()
    return {line.split()[0] for line in listed if line.startswith("  ") and line.strip()}


def why_not(pdctl: str) -> dict[str, str]:
    """Reasons the fleet cannot be measured here (empty when it can)."""
    missing: dict[str, str] = {}
    have = commands(pdctl)
    for cmd in ("up", "preflight"):
        if cmd not in have:
            missing[cmd] = f"`pdctl {cmd}` does not exist yet"
    if "down" not in have and "up" not in missing:
        missing["up"] = "`pdctl down` (needed between runs) does not exist yet"
    needs = [t for t in ("/usr/sbin/sshd", "ssh-keygen", "ip") if not shutil.which(t)]
    problem = ""
    if needs:
        problem = "missing " + ", ".join(needs)
    elif os.geteuid() != 0:
        problem = "needs root (network namespaces for the SSH hosts)"
    if problem:
        for cmd in ("up", "preflight"):
            missing.setdefault(cmd, problem)
    return missing


def measure(pdctl: str, rounds: int, tmp: Path) -> FleetResult:
    result = FleetResult(missing=why_not(pdctl))
    if len(result.missing) == 2:
        return result
    root = tmp / "fleet"
    venv = stand_in_venv(root)
    env = dict(os.environ, COLUMNS="200")
    try:
        _measure(pdctl, rounds, root, venv, env, result)
        left = stop_leftovers(root / "data")
        if left:
            result.notes.append(f"4: stopped {len(left)} stand-in engines `pdctl down` left.")
    except (RuntimeError, OSError) as exc:  # a host that would not start, a failed command
        why = " ".join(str(exc).split())[:300]
        for cmd in ("up", "preflight", "preflight+bashrc"):
            if not any(c == cmd for c, _ in result.runs):
                result.missing.setdefault(cmd, why)
        stop_leftovers(root / "data")
    return result


def _measure(
    pdctl: str, rounds: int, root: Path, venv: Path, env: dict, result: FleetResult
) -> None:
    for plain in (True, False):
        if not plain and "preflight" in result.missing:
            break
        with Fleet(root / f"ssh-{plain}", max(SIZES), plain_shell=plain) as fleet:
            specs = {}
            for n in SIZES:
                path = root / f"fleet-{n}.yaml"
                path.write_text(yaml.safe_dump(fleet_spec(fleet, n, venv, root / "data")))
                specs[n] = path
            kh = ["--known-hosts", str(fleet.known_hosts)]
            if plain and "up" not in result.missing:
                _up_rounds(pdctl, fleet, specs, kh, rounds, env, result)
            if "preflight" not in result.missing:
                name = "preflight" if plain else "preflight+bashrc"
                cmd = {n: [pdctl, "preflight", str(specs[n]), "-o", "json", *kh] for n in SIZES}
                for r in range(rounds + 1):  # round 0 warms up
                    for n in SIZES if r % 2 == 0 else SIZES[::-1]:
                        sample = _timed(cmd[n], env, fleet, ok=(0, 1))
                        if r:
                            result.runs.setdefault((name, n), []).append(sample)


def _timed(argv: list[str], env: dict, fleet: Fleet, ok: tuple[int, ...] = (0,)) -> Sample:
    before = _sshd_cpu(fleet)
    wall, usage = timing.run_usage(argv, env, ok)
    time.sleep(0.3)  # let each sshd reap the session that just closed (untimed)
    return Sample(wall, usage.ru_utime + usage.ru_stime, _sshd_cpu(fleet) - before)


def _sshd_cpu(fleet: Fleet) -> float:
    """CPU seconds of the fleet's sshd daemons and their reaped children."""
    total = 0
    for proc in fleet.procs:
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def _up_rounds(
    pdctl: str, fleet: Fleet, specs: dict, kh: list, rounds: int, env: dict, result: FleetResult
) -> None:
    try:
        for r in range(rounds + 1):  # round 0 warms up
            for n in SIZES if r % 2 == 0 else SIZES[::-1]:
                down = [pdctl, "down", str(specs[n]), *kh]
                _timed(down, env, fleet, ok=(0, 1))
                sample = _timed(
                    [pdctl, "up", str(specs[n]), "--yes", "--timeout", "120", *kh], env, fleet
                )
                if r:
                    result.runs.setdefault(("up", n), []).append(sample)
                _timed(down, env, fleet)
    finally:
        for n in SIZES:
            subprocess.run([pdctl, "down", str(specs[n]), *kh], capture_output=True, env=env)
    result.notes.append(
        "4a: `pdctl up --yes` from nothing running until every stand-in engine answers "
        "/health and /v1/models over the SSH port-forward; `pdctl down` (untimed) after "
        "each run."
    )
