"""A port already held by another process must not pass for the unit's engine.

Another server on the unit's port that answers /health and /v1/models like vLLM (the stand-in
engine itself, started outside pdctl) used to make `up` report the unit healthy while the unit
had died on `address already in use`. The probe now checks, on the host, that the listener
belongs to the unit (its process group); `up` fails with one line naming the holder, exit 1,
and leaves the other process alone.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import wait_port
from tests.targets.docker.test_target import IMAGE
from tests.targets.testbed import HERE, free_port, lo1_spec, pdctl, processes_in


@pytest.fixture
def squatter(tmp_path: Path):
    """Another process on a free port of this machine's loopback (where the sshd of test host
    lo1 runs) answering /health and /v1/models like vLLM, for the same model."""
    port = free_port()
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "fake_vllm.py"), "serve", "stand-in", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder,
        env={"PATH": os.environ["PATH"]}, start_new_session=True,
    )
    try:
        wait_port(port, alive=lambda: proc.poll() is None, what="the squatting server")
        yield proc, port
    finally:
        proc.terminate()
        proc.wait()


def test_up_refuses_a_port_held_by_another_process(ssh_env, fake_venv, tmp_path, squatter):
    proc, port = squatter
    spec = lo1_spec(ssh_env, tmp_path, "own", fake_venv, port)
    known = ["--known-hosts", ssh_env.known_hosts]
    try:
        up = pdctl("up", str(spec), "--yes", *known, "--timeout", "60")
        out = up.stdout + up.stderr
        assert up.returncode == 1, out
        assert "own-serve-0 on lo1: healthy" not in out
        (line,) = up.stderr.strip().splitlines()
        expected = (
            f"port {port} on host lo1 is held by another process (pid {proc.pid}, "
            f"'{sys.executable} {HERE / 'fake_vllm.py'} serve stand-in --port {port}'), "
            "not by own-serve-0"
        )
        assert expected in line, line
        assert line.startswith("error: up failed: own-serve-0 on host lo1 failed: "), line
        assert proc.poll() is None, "pdctl stopped the other process"
        socket.create_connection(("127.0.0.1", port), timeout=5).close()  # still serving
        assert processes_in(tmp_path / "lo1") == []  # the unit was rolled back
    finally:
        pdctl("down", str(spec), *known)


@pytest.fixture
def host_network_container(docker_client, tmp_path: Path):
    """A container of the stand-in engine image in the host's network, listening on a free
    port, and a unit folder whose `container-id` names it (as docker-start.sh writes it)."""
    client = docker_client
    url = os.environ["PDCTL_TEST_DOCKER_HOST"]
    port = free_port()
    name = f"pdctl-port-owner-{port}"
    container = client.containers.run(
        IMAGE, ["m", "--port", str(port)], name=name, network_mode="host", detach=True
    )
    unit = tmp_path / name
    unit.mkdir()
    (unit / "container-id").write_text(container.id + "\n")
    try:
        def alive() -> bool:
            container.reload()
            return container.status in ("created", "running")

        wait_port(port, alive=alive, what="the squatting container", detail=container.logs)
        yield unit, name, port, url
    finally:
        container.remove(force=True)


def test_a_containers_listener_is_the_units_and_another_is_not(host_network_container, squatter):
    """The port-owner script (what the probe runs on a host) for a container unit: the
    container's own process is the unit's; another process on the unit's port is not."""
    from pdctl.render.host_scripts import host_scripts, with_vars
    from pdctl.targets.health import port_problem

    unit, name, port, url = host_network_container
    env = {"PATH": os.environ["PATH"], "DOCKER_HOST": url}

    def listing(p: int) -> str:
        script = with_vars(host_scripts().port_owner, unit_dir=str(unit), name=name, port=p)
        res = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr
        return res.stdout

    mine = listing(port)
    assert mine.startswith("unit\t"), mine
    assert port_problem(mine, port, "local", name) is None
    proc, other_port = squatter
    theirs = listing(other_port)
    assert theirs.startswith(f"other\t{proc.pid}\t"), theirs
    assert port_problem(theirs, other_port, "local", name).startswith(
        f"port {other_port} on host local is held by another process (pid {proc.pid}, "
    )


def test_a_listener_this_user_cannot_see_is_another_process(squatter, tmp_path):
    """As an SSH user who cannot read the holder's /proc entries (another user's process), the
    listener is still not the unit's: the problem says it cannot be seen."""
    import shutil

    from pdctl.render.host_scripts import host_scripts, with_vars
    from pdctl.targets.health import port_problem

    if os.geteuid() != 0 or shutil.which("runuser") is None:
        pytest.skip("needs root and runuser to run the script as another user")
    proc, port = squatter
    unit_dir = str(tmp_path / "u-0")
    script = with_vars(host_scripts().port_owner, unit_dir=unit_dir, name="u-0", port=port)
    res = subprocess.run(
        ["runuser", "-u", "nobody", "--", "bash", "-c", script], capture_output=True, text=True,
        cwd="/",
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == "hidden\t-\t-\n"
    assert port_problem(res.stdout, port, "h", "u-0") == (
        f"port {port} on host h is held by another process (one this SSH user cannot see), "
        "not by u-0"
    )
