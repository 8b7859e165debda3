"""A multi-node group in containers (`runtime: docker`) on the real dockerd: each node's
container runs the group guard as its entrypoint. The worker's engine crashes, Docker restarts
its container at once, its guard waits silent (--restart-delay), the leader's guard sees it
gone and stops the leader, Docker restarts that container too, and the group meets again as
one. The stand-in engine (tests/targets/fake_vllm.py, deaf like vLLM to a dead node) runs in an
image made here from the systemd test host's Debian image (it has python3, which the guard
needs, as vLLM's images do). Two hosts reach the one test dockerd through the sshd of
tests/targets/docker/test_ssh.py: as 127.0.0.1 and as localhost (peers: 127.0.0.2)."""

from __future__ import annotations

import io
import json
import os
import re
import tarfile
import time
from pathlib import Path

import pytest

from pdctl.targets.docker.engine import client_for
from tests.helpers import checked
from tests.targets.docker.bed import DockerSshd
from tests.targets.testbed import HERE, free_port, pdctl, stand_in_spec, write_spec

# tests/services.sh's systemd host image (Debian 12, python3), at the revision it builds
_REV = re.search(r"^SYSTEMD_IMAGE_REV=(\d+)$", (Path(__file__).parents[2] / "services.sh")
                 .read_text(), re.M)
assert _REV, "tests/services.sh sets SYSTEMD_IMAGE_REV"
BASE = f"pdctl-test/systemd:{_REV[1]}"
IMAGE = f"pdctl-test/pyengine:{_REV[1]}"


@pytest.fixture(scope="module")
def client():
    url = os.environ.get("PDCTL_TEST_DOCKER_HOST")
    if not url:
        pytest.skip("no test dockerd: run `RUN=... tests/services.sh start`")
    docker = client_for(url)
    try:
        docker.images.get(BASE)
    except Exception:  # noqa: BLE001 - docker.errors.ImageNotFound, without importing docker
        # where the systemd host runs (CI), its image is there: a miss is a fault, not a skip
        if os.environ.get("PDCTL_TEST_SYSTEMD_HOST"):
            raise
        pytest.skip(f"no {BASE} image (tests/services.sh builds it with the systemd host)")
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as t:
        data = (HERE / "fake_vllm.py").read_bytes()
        info = tarfile.TarInfo("vllm")
        info.size, info.mode = len(data), 0o755
        t.addfile(info, io.BytesIO(data))
    box = docker.containers.create(BASE, command=["true"])
    try:
        box.put_archive("/usr/local/bin", tar.getvalue())
        box.commit(IMAGE, changes=['ENTRYPOINT ["vllm", "serve"]', "CMD []"])
    finally:
        box.remove(force=True)
    yield docker
    docker.close()


def restarts(docker, name: str) -> int:
    c = docker.containers.get(name)
    return c.attrs["RestartCount"] if c.status == "running" else -1


def test_a_group_in_containers_restarts_as_one_when_a_node_dies(
    client,
    docker_sshd: DockerSshd,
    tmp_path: Path,
) -> None:
    hosts = []
    for name, address, peers in (("dka", "127.0.0.1", None), ("dkb", "localhost", "127.0.0.2")):
        entry = {
            "name": name, "address": address, "port": docker_sshd.port, "user": "root",
            "identityFile": docker_sshd.key, "runtime": "docker", "dataDir": str(tmp_path / name),
            "hfCache": str(tmp_path / f"hf-{name}"),
        }
        if peers:
            entry["addressForPeers"] = peers
        hosts.append(entry)
    serve = {"tensorParallel": 2, "nodes": 2, "port": free_port(), "rendezvousPort": free_port()}
    serve["guardPort"] = free_port()
    engine = {"device": "cpu", "image": IMAGE, "env": {"FAKE_VLLM_DEAF": "1"}}
    spec = write_spec(tmp_path / "spec.yaml", stand_in_spec("dgrp", hosts, serve, engine))
    known = tmp_path / "known_hosts"
    line = docker_sshd.known_line.strip()
    known.write_text(f"{line}\n{line.replace('[127.0.0.1]', '[localhost]', 1)}\n")
    conn = ["--known-hosts", str(known)]
    leader, worker = "dgrp-serve-0", "dgrp-serve-0-node1"
    try:
        checked(pdctl("up", str(spec), "--yes", *conn, "--timeout", "90"))
        box = client.containers.get(worker)
        assert box.attrs["Config"]["Entrypoint"] == ["python3"]
        assert box.attrs["Config"]["Cmd"][0] == "/pdctl/unit/guard.py"

        deadline = time.monotonic() + 180  # only ends a hang
        # The guard acts on a node it has heard from (never on one still starting).
        heard = f"pdctl-guard: heard from {worker}".encode()
        while heard not in client.containers.get(leader).logs():
            assert time.monotonic() < deadline
            time.sleep(0.2)
        # The worker's engine crashes: the guard (the container's PID 1) passes it on.
        box.exec_run(["pkill", "-KILL", "-P", "1"])
        while not (restarts(client, worker) >= 1 and restarts(client, leader) >= 1):
            assert time.monotonic() < deadline, (restarts(client, worker), restarts(client, leader))
            time.sleep(0.5)
        while True:
            status = pdctl("status", str(spec), "-o", "json", *conn)
            rows = {r["unit"]: r for r in json.loads(status.stdout)["instances"]}
            if rows[leader]["health"] == "healthy":
                break
            assert time.monotonic() < deadline, rows
            time.sleep(1)
        assert (restarts(client, worker), restarts(client, leader)) == (1, 1)
        lead_log = client.containers.get(leader).logs().decode()
        assert f"pdctl-guard: {worker} (127.0.0.2:" in lead_log and "has not answered" in lead_log
        assert f"pdctl-guard: {leader} started again: waiting 10 s" in lead_log
        assert "rank 1 joined from" in lead_log.split("started again")[1]
        work_log = client.containers.get(worker).logs().decode()
        assert f"pdctl-guard: {worker} started again: waiting 10 s" in work_log
    finally:
        down = pdctl("down", str(spec), *conn)
    assert down.returncode == 0, down.stdout + down.stderr
    assert not client.containers.list(all=True, filters={"label": "pdctl.io/deployment=dgrp"})
