"""The test bed for target tests: the real sshd test hosts that tests/services.sh starts, a
stand-in engine, and helpers. Tests skip (with the reason) when the services are not running.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.helpers import checked, pdctl, worker  # noqa: F401 - the target tests import pdctl from here

HERE = Path(__file__).resolve().parent

# Ports handed out by free_port come from below Linux's ephemeral range (32768-60999), so no
# outgoing connection (an SSH session, a port forward) can take one between the check and the
# engine's bind, and above the fixed ports the e2e tests use (18xxx); each pytest-xdist worker
# has its own share, so that two never hand out one port between its check and its bind.
_K, _N = worker()
_PORTS = range(20000 + _K * 12000 // _N, 20000 + (_K + 1) * 12000 // _N)
_next_port = random.randrange(_PORTS.start, _PORTS.stop - len(_PORTS) // 6)


def free_port(span: int = 4) -> int:
    """A base port P with P .. P+span-1 free on every address now (pdctl gives replica i the
    port P+i), never overlapping a span handed out before in this process."""
    global _next_port
    base = _next_port
    while base + span <= _PORTS.stop:
        socks = []
        try:
            for port in range(base, base + span):
                s = socket.socket()
                socks.append(s)
                s.bind(("", port))
        except OSError:
            base += 1
            continue
        finally:
            for s in socks:
                s.close()
        _next_port = base + span
        return base
    raise RuntimeError(f"no {span} consecutive free ports in {_PORTS}")


def closed_port() -> int:
    """A port nothing listens on, for a connection that must be refused: one of free_port's,
    not one the kernel hands out and the test closes again. That one lies in the ephemeral
    range, where a connect() to 127.0.0.1:P whose own local port is P connects to itself (TCP
    simultaneous open) and a server binding port 0 may get it."""
    return free_port(1)


@dataclass(frozen=True)
class TestHost:
    __test__ = False  # a test sshd host, not a test class for pytest to collect

    name: str
    address: str
    port: int


@dataclass(frozen=True)
class SshEnv:
    hosts: tuple[TestHost, ...]
    key: str
    known_hosts: str

    def host(self, name: str) -> TestHost:
        return next(h for h in self.hosts if h.name == name)


def ssh_env_or_skip() -> SshEnv:
    hosts_file = os.environ.get("PDCTL_TEST_SSH_HOSTS")
    key = os.environ.get("PDCTL_TEST_SSH_KEY")
    known = os.environ.get("PDCTL_TEST_KNOWN_HOSTS")
    if not (hosts_file and key and known and os.path.exists(hosts_file)):
        pytest.skip("no SSH test hosts: run `RUN=... tests/services.sh start` and source $RUN/env")
    hosts = []
    for line in Path(hosts_file).read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            hosts.append(TestHost(parts[0], parts[1], int(parts[2])))
    return SshEnv(tuple(hosts), key, known)


@pytest.fixture(scope="session")
def ssh_env() -> SshEnv:
    return ssh_env_or_skip()


def host_entry(env: SshEnv, host: TestHost, data_dir: Path, **extra: object) -> dict:
    entry = {
        "name": host.name, "address": host.address, "port": host.port, "user": "root",
        "identityFile": env.key, "runtime": "venv", "dataDir": str(data_dir / host.name),
    }
    entry.update(extra)
    return entry


def stand_in_spec(
    name: str, hosts: list[dict], serve: dict, engine: dict | None = None, **sections: object
) -> dict:
    """A phase 0 spec of the stand-in engine (fake_vllm.py) on `hosts`: the CPU engine unless
    `engine` says otherwise; `sections` (secrets ...) come between the engine and the hosts."""
    return {
        "name": name, "phase": 0, "model": {"name": "stand-in", "servedName": "stand-in"},
        "engine": engine if engine is not None else {"device": "cpu"}, **sections, "hosts": hosts,
        "serve": serve,
    }


def write_spec(path: Path, spec: dict) -> Path:
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def lo1_spec(
    env: SshEnv, data: Path, name: str, venv: Path | None = None, port: int | None = None,
    engine: dict | None = None, file: str = "spec.yaml", host: dict | None = None,
    replicas: int = 1, **sections: object,
) -> Path:
    """data/`file`: stand_in_spec of `replicas` engines `name` on lo1 (`host`: more fields of
    its entry), from `port` (a free one by default)."""
    extra = {**({"venv": str(venv)} if venv else {}), **(host or {})}
    entry = host_entry(env, env.host("lo1"), data, **extra)
    serve = {"replicas": replicas, "port": port or free_port()}
    return write_spec(data / file, stand_in_spec(name, [entry], serve, engine, **sections))


def connect(env: SshEnv, to: str | TestHost = "lo1", known_hosts: str = ""):  # type: ignore[no-untyped-def]
    """A pdctl Connection to the test host `to` (a name of `env`'s), connected as root with
    the test key, checked against `known_hosts` (`env`'s by default)."""
    from pdctl.spec.model import Host
    from pdctl.targets.ssh import Connection, SshOptions

    h = env.host(to) if isinstance(to, str) else to
    host = Host(name=h.name, address=h.address, port=h.port, user="root", identityFile=env.key)
    return Connection(host, SshOptions(known_hosts=known_hosts or env.known_hosts)).connect()


def status_rows(spec: Path, *flags: str, code: int | None = None) -> dict[str, dict]:
    """`pdctl status -o json`'s instances by unit (its exit status `code` unless None)."""
    out = pdctl("status", str(spec), "-o", "json", *flags)
    if code is not None:
        checked(out, code)
    return {r["unit"]: r for r in json.loads(out.stdout)["instances"]}


def status_row(spec: Path, *flags: str) -> dict:
    """The one instance of a one-unit deployment, from `pdctl status -o json`."""
    (row,) = status_rows(spec, *flags).values()
    return row


@contextmanager
def deployed(spec: Path, *flags: str, timeout: str = "60") -> Iterator[dict]:
    """`up` of `spec` (it must succeed), its result under "up" of the dict yielded; `down`
    after, whatever happened (a failed `up` too), its result under "down"."""
    done: dict = {}
    try:
        done["up"] = checked(pdctl("up", str(spec), "--yes", *flags, "--timeout", timeout))
        yield done
    finally:
        done["down"] = pdctl("down", str(spec), *flags)


@pytest.fixture(scope="session")
def fake_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 'Python environment' whose bin/vllm is the stand-in engine."""
    root = tmp_path_factory.mktemp("fakevenv")
    (root / "bin").mkdir()
    target = root / "bin" / "vllm"
    shutil.copy(HERE / "fake_vllm.py", target)
    target.chmod(0o755)
    return root


def listening(port: int) -> bool:
    out = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True)
    return bool(out.stdout.strip())


def processes_with(text: str) -> list[str]:
    """Command lines (from /proc) that contain `text`, excluding this test process."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        cmd = raw.replace(b"\0", b" ").decode("utf-8", "replace")
        if text in cmd:
            found.append(f"{pid}: {cmd}")
    return found


def processes_in(folder: Path) -> list[str]:
    """Processes whose working folder is under `folder` (start.sh runs units from their
    folder, and every child process inherits it, even renamed ones like VLLM::EngineCore)."""
    found = []
    prefix = str(folder)
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        if cwd.startswith(prefix):
            found.append(f"{pid}: {cwd}")
    return found
