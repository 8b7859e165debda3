"""Phase 2 with `runtime: docker` on the real dockerd: `pdctl up` over SSH runs the rendered
start scripts, the prefill and decode engines start as containers on the host's network (the
stand-in engine image listens on the spec's port itself, no `-p`), the router as a process;
`status` finds them healthy, `docker inspect` shows the host network, the host IPC namespace,
the unit folder mount, pdctl's environment, the host's restart policy (default
unless-stopped) and log rotation (default 100m x 5); an engine whose main process dies is
brought back by Docker and `status` says how often; `down` removes them.

The host is an sshd this module starts (as tests/targets/docker/test_ssh.py's, with SFTP for
the deployment folder) whose sessions see DOCKER_HOST, so the scripts' `docker` reaches the
test dockerd. Its containers share this machine's network namespace with `--network host`
(the test dockerd runs in it), so the health probes reach them on 127.0.0.1. GPUs,
/dev/infiniband and HAMi-core's preload need hardware the test dockerd has not: the SDK test
below creates (without starting) a sliced decode container with the library and RDMA options
and reads its configuration back."""

from __future__ import annotations

import os
import socket
from dataclasses import replace
from pathlib import Path

import yaml

from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from pdctl.targets.docker.engine import create_kwargs
from tests.helpers import checked
from tests.targets.docker.bed import DockerSshd
from tests.targets.docker.test_restart import kill_main_process, restarted_once
from tests.targets.docker.test_target import IMAGE
from tests.targets.hosts.test_hami_hosts_up import router_venv
from tests.targets.testbed import free_port, pdctl, status_rows, write_spec

ROOT = Path(__file__).resolve().parents[3]


def spec_file(sshd: DockerSshd, tmp: Path) -> Path:
    model = tmp / "model"
    model.mkdir()
    host = {
        "name": "local", "address": "127.0.0.1", "port": sshd.port, "user": "root",
        "identityFile": sshd.key, "runtime": "docker", "dataDir": str(tmp / "data"),
        "hfCache": str(tmp / "hf"),
    }
    spec = {
        "name": "dockpd", "phase": 2, "model": {"name": str(model), "servedName": "stand-in"},
        "engine": {"device": "cpu", "image": IMAGE, "version": "0.33.0"}, "hosts": [host],
        "prefill": {"replicas": 1, "port": free_port()},
        "decode": {"replicas": 1, "port": free_port()},
        "disaggregation": {"connector": "nixl", "sideChannelPort": free_port()},
        "router": {"port": free_port(), "metricsPort": free_port(), "venv": str(router_venv(tmp))},
    }
    return write_spec(tmp / "spec.yaml", spec)


def test_phase2_engines_in_containers_up_healthy_on_the_host_network_and_down(
    docker_client,
    docker_sshd: DockerSshd,
    tmp_path: Path,
) -> None:
    spec = spec_file(docker_sshd, tmp_path)
    known = tmp_path / "known_hosts"
    known.write_text(docker_sshd.known_line)
    conn = ["--known-hosts", str(known)]
    doc = yaml.safe_load(spec.read_text())
    engines = {"dockpd-prefill-0": doc["prefill"]["port"], "dockpd-decode-0": doc["decode"]["port"]}
    try:
        checked(pdctl("up", str(spec), "--yes", *conn, "--timeout", "90"))
        rows = status_rows(spec, *conn, code=0)
        for name in (*engines, "dockpd-router"):
            assert rows[name]["health"] == "healthy", rows[name]
        for name, port in engines.items():
            c = docker_client.containers.get(name)
            host_config = c.attrs["HostConfig"]
            assert host_config["NetworkMode"] == "host"
            assert host_config["IpcMode"] == "host"
            assert not host_config.get("PortBindings")
            binds = {m["Destination"]: m["Source"] for m in c.attrs["Mounts"]}
            assert binds["/pdctl/unit"] == str(tmp_path / "data" / "dockpd" / name)
            env = dict(e.split("=", 1) for e in c.attrs["Config"]["Env"])
            assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
            assert "CUDA_VISIBLE_DEVICES" not in env
            args = c.attrs["Config"]["Cmd"]
            assert args[args.index("--port") + 1] == str(port)
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                pass  # the engine's own port, on the host, without a mapping
            # the host's restart policy (default unless-stopped) and json-file rotation
            policy = {"Name": "unless-stopped", "MaximumRetryCount": 0}
            assert host_config["RestartPolicy"] == policy
            logs = {"Type": "json-file", "Config": {"max-size": "100m", "max-file": "5"}}
            assert host_config["LogConfig"] == logs
        # An engine whose main process dies is brought back by Docker; `status` says how often.
        kill_main_process(docker_client.containers.get("dockpd-prefill-0"))
        restarted_once(docker_client, "dockpd-prefill-0")
        rows = status_rows(spec, *conn, code=0)
        assert rows["dockpd-prefill-0"]["state"] == "running (restarted 1 time)", rows
        assert rows["dockpd-decode-0"]["state"] == "running", rows
    finally:
        down = pdctl("down", str(spec), *conn)
    assert down.returncode == 0, down.stdout + down.stderr
    left = docker_client.containers.list(all=True, filters={"label": "pdctl.io/deployment=dockpd"})
    assert left == []


def test_sdk_creates_a_sliced_decode_container_with_the_library_lock_and_rdma(
    docker_client, tmp_path: Path,
) -> None:
    """The docker SDK's container of a phase 3 decode unit (HAMi-core, rdmaDevices), the
    bundle's, as the daemon records it: created, not started (no GPU, no /dev/infiniband
    here: the stand-in image and no GPU request)."""
    doc = yaml.safe_load((ROOT / "examples/phase3-hami-docker.yaml").read_text())
    library = tmp_path / "libvgpu.so"
    library.write_bytes(b"")
    doc["decode"]["share"]["library"] = str(library)
    doc["hosts"][0]["dataDir"] = str(tmp_path / "data")
    doc["hosts"][0]["hfCache"] = str(tmp_path / "hf")
    plan = make_plan(load_text(yaml.safe_dump(doc), "spec.yaml")[0])
    rendered = next(u for u in render(plan).units if u.unit.name == "qwen-hami-docker-decode-1")
    assert rendered.container is not None
    unit = rendered.unit
    box = replace(rendered.container, image=IMAGE, gpus=())
    opts = create_kwargs(box, {}, home=os.path.expanduser("~"))
    container = docker_client.containers.create(**opts)
    try:
        c = docker_client.containers.get(container.id)
        host_config = c.attrs["HostConfig"]
        assert host_config["NetworkMode"] == "host"
        assert host_config["IpcMode"] == "host"
        assert host_config["CapAdd"] == ["IPC_LOCK"]
        assert host_config["Ulimits"] == [{"Name": "memlock", "Soft": -1, "Hard": -1}]
        ib = "/dev/infiniband"
        assert host_config["Devices"] == [
            {"PathOnHost": ib, "PathInContainer": ib, "CgroupPermissions": "rwm"}
        ]
        binds = sorted(host_config["Binds"])
        folder = tmp_path / "data" / "qwen-hami-docker" / unit.name
        assert f"{folder}:/pdctl/unit:rw" in binds
        assert f"{library}:/usr/local/vgpu/libvgpu.so:ro" in binds
        assert "/tmp/vgpulock:/tmp/vgpulock:rw" in binds
        env = dict(e.split("=", 1) for e in c.attrs["Config"]["Env"])
        assert env["LD_PRELOAD"] == "/usr/local/vgpu/libvgpu.so"
        assert env["CUDA_DEVICE_MEMORY_LIMIT"] == "71885m"
        assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == "/pdctl/unit/vgpu.cache"
    finally:
        container.remove(force=True)
