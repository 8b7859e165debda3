"""Restart policy and log rotation of the containers the docker SDK path (--docker-url)
starts, on the real dockerd: each container takes the host's `restart` policy and json-file
rotation; an engine whose main process dies is brought back by Docker and `status` says how
often; `down` removes the containers and none comes back. The rendered docker-start.sh over
SSH is checked for the same in test_pd_up.py."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from tests.helpers import checked
from tests.targets.docker.bed import docker_spec, urls
from tests.targets.testbed import free_port, pdctl, status_rows, write_spec


def kill_main_process(container) -> None:
    """End the container's PID 1 from inside (the stand-in exits on TERM), as a crash of the
    engine would: not `docker stop`/`docker kill`, which mark the container stopped by hand."""
    container.exec_run(["sh", "-c", "kill -TERM 1"])


def restarted_once(client, name: str) -> None:
    """Until Docker has restarted `name` once and it runs again (it does at once: a bound
    of 120 s only ends a hang)."""
    deadline = time.monotonic() + 120
    while True:
        c = client.containers.get(name)
        if c.attrs["RestartCount"] >= 1 and c.status == "running":
            return
        assert time.monotonic() < deadline, (c.status, c.attrs["RestartCount"])
        time.sleep(0.2)


def test_sdk_containers_take_the_hosts_policy_and_come_back_after_a_crash(
    docker_client,
    tmp_path: Path,
) -> None:
    host = {"restart": "always", "logMaxSize": "10m", "logMaxFiles": 2}
    spec = docker_spec(tmp_path, "sdkrestart", host=host)
    url = urls("local")
    name = "sdkrestart-serve-0"
    try:
        checked(pdctl("up", str(spec), "--yes", "--timeout", "60", *url))
        c = docker_client.containers.get(name)
        host_config = c.attrs["HostConfig"]
        assert host_config["RestartPolicy"] == {"Name": "always", "MaximumRetryCount": 0}
        logs = {"Type": "json-file", "Config": {"max-size": "10m", "max-file": "2"}}
        assert host_config["LogConfig"] == logs
        kill_main_process(c)
        restarted_once(docker_client, name)
        assert rows_state(spec, url, name) == "running (restarted 1 time)"
        # The policy is part of the unit: a changed policy replaces the container.
        doc = yaml.safe_load(spec.read_text())
        doc["hosts"][0]["restart"] = "on-failure:3"
        write_spec(spec, doc)
        planned = pdctl("up", str(spec), "--dry-run", *url)
        assert "spec changed" in planned.stdout, planned.stdout + planned.stderr
    finally:
        down = pdctl("down", str(spec), *url)
    assert down.returncode == 0, down.stdout + down.stderr
    labelled = {"label": "pdctl.io/deployment=sdkrestart"}
    assert docker_client.containers.list(all=True, filters=labelled) == []


def rows_state(spec: Path, url: list[str], name: str) -> str:
    return status_rows(spec, *url, code=0)[name]["state"]


def test_up_fails_at_once_when_docker_restarts_a_dying_engine(docker_client) -> None:
    """Under unless-stopped an engine that exits is started again and again: `up` reports the
    first restart with the engine's own error, not a timeout after a crash loop."""
    from pdctl.errors import PdctlError
    from pdctl.targets.docker.engine import Engine
    from tests.targets.docker.test_target import HOST, changes, unit, wait

    tgt = Engine(docker_client, "t-restart-dies", stop_seconds=1, where=HOST.name)
    name, port = "t-restart-dies-bad", free_port()
    units = [unit(tgt.deployment, name, port, model="/missing/model")]
    try:
        tgt.apply(units, changes(tgt, units), {})
        with pytest.raises(PdctlError) as err:
            wait(tgt, [(name, port)], 120)
        message = str(err.value)
        assert "Docker restarted it (restart policy unless-stopped)" in message, message
        assert "model path /missing/model does not exist" in message, message
    finally:
        tgt.down()
    assert tgt.containers() == []


def test_pdctl_restart_recreates_the_named_container_only(docker_client, tmp_path: Path) -> None:
    """`pdctl restart` through the docker SDK: the named unit gets a new container (a new id),
    healthy again; the other keeps its container."""
    spec = docker_spec(tmp_path, "sdkrst", {"a": "127.0.0.1", "b": "127.0.0.2"}, free_port())
    url = urls("a", "b")
    try:
        checked(pdctl("up", str(spec), "--yes", "--timeout", "60", *url))
        names = ("sdkrst-serve-0", "sdkrst-serve-1")
        before = {n: docker_client.containers.get(n).id for n in names}
        done = checked(pdctl("restart", str(spec), "sdkrst-serve-1", "--yes", "--timeout", "60",
                             *url))
        assert "restarted sdkrst-serve-1: healthy." in done.stdout, done.stdout
        assert docker_client.containers.get("sdkrst-serve-0").id == before["sdkrst-serve-0"]
        assert docker_client.containers.get("sdkrst-serve-1").id != before["sdkrst-serve-1"]
        rows = status_rows(spec, *url, code=0)
        assert {r["health"] for r in rows.values()} == {"healthy"}, rows
    finally:
        checked(pdctl("down", str(spec), *url))
