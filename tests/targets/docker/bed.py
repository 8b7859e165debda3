"""What the docker target tests (`--docker-url`) share: a spec of stand-in engines on docker
hosts, the `--docker-url` arguments, the removal of a deployment's containers, and the fixtures
(tests/conftest.py's pytest_plugins makes them every test's): the test dockerd's client and an
sshd whose sessions reach that dockerd."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from pdctl.targets.docker.engine import client_for
from tests.sshd import need_root, start_sshd
from tests.targets.testbed import free_port, ssh_env_or_skip, write_spec

IMAGE = "pdctl-test/engine:1"  # the stand-in engine (test_target.py imports it)
LOCAL = {"local": "127.0.0.1"}


def docker_spec(
    tmp: Path, name: str, hosts: dict[str, str] = LOCAL, port: int | None = None,
    image: str = IMAGE, host: dict | None = None, listen: bool = True, replicas: int = 0,
    **sections: Any,
) -> Path:
    """tmp/`name`.yaml: a phase 0 spec of one stand-in engine per docker host (name ->
    address; `replicas` of them if given) serving tmp/model as `tiny` on `port` (a free one by
    default), on the host's network (the test dockerd has no bridge). Each host's HF cache is
    its own folder, tmp/hf-NAME, whose `standin/listen` (unless not `listen`) makes the engine
    listen on the host's address and `port`. `host`: more fields of every host (None leaves
    one out); `sections` replace the spec's own."""
    port = port or free_port()
    model = tmp / "model"
    model.mkdir(exist_ok=True)
    entries = []
    for host_name, address in hosts.items():
        ctl = tmp / f"hf-{host_name}" / "standin"
        ctl.mkdir(parents=True, exist_ok=True)
        if listen:
            (ctl / "listen").write_text(f"{address}:{port}")
        entry = {"name": host_name, "address": address, "runtime": "docker", "network": "host"}
        entry.update(hfCache=str(tmp / f"hf-{host_name}"), dataDir=str(tmp / "data"))
        entries.append({k: v for k, v in {**entry, **(host or {})}.items() if v is not None})
    spec = {
        "name": name, "phase": 0, "model": {"name": str(model), "servedName": "tiny"},
        "engine": {"device": "cpu", "image": image}, "hosts": entries,
        "serve": {"port": port, "replicas": replicas or len(hosts)}, **sections,
    }
    return write_spec(tmp / f"{name}.yaml", spec)


def urls(*hosts: str) -> list[str]:
    """`--docker-url HOST=<the test dockerd>` for each of `hosts`."""
    out = []
    for host in hosts:
        out += ["--docker-url", f"{host}={os.environ['PDCTL_TEST_DOCKER_HOST']}"]
    return out


def remove_all(client: Any, deployment: str) -> None:
    labelled = {"label": f"pdctl.io/deployment={deployment}"}
    for c in client.containers.list(all=True, filters=labelled):
        c.remove(force=True)


@pytest.fixture(scope="module")
def docker_client():
    """The test dockerd's client, the stand-in engine image imported (test_target.py)."""
    url = os.environ.get("PDCTL_TEST_DOCKER_HOST")
    if not url:
        pytest.skip("no test dockerd: run `RUN=... tests/services.sh start` and source $RUN/env")
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox-static is not installed (apt-get install busybox-static)")
    client = client_for(url)
    from tests.targets.docker.test_target import engine_rootfs, ensure_engine_image

    ensure_engine_image(client, engine_rootfs(busybox))
    yield client
    client.close()


@dataclass(frozen=True)
class DockerSshd:
    port: int
    key: str
    known_line: str  # this sshd's entry for a known_hosts file


@pytest.fixture(scope="module")
def docker_sshd(tmp_path_factory: pytest.TempPathFactory):
    docker_host = os.environ.get("PDCTL_TEST_DOCKER_HOST", "")
    if not docker_host or shutil.which("docker") is None:
        pytest.skip("needs the test dockerd (tests/services.sh) and the docker CLI")
    need_root()
    env = ssh_env_or_skip()
    folder = tmp_path_factory.mktemp("docker-sshd")
    server = start_sshd(env, folder, "docker", extra=f"SetEnv DOCKER_HOST={docker_host}\n")
    try:
        yield DockerSshd(server.host.port, env.key, server.host_line)
    finally:
        server.stop()
