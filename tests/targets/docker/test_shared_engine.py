"""Two spec hosts on one Docker engine (two addresses of one machine): each host sees the
other's container through the shared engine; a second `up` must not plan to stop it."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import checked
from tests.targets.docker.bed import docker_spec, remove_all, urls
from tests.targets.testbed import free_port, pdctl


def ids(client) -> dict[str, str]:  # type: ignore[no-untyped-def]
    labelled = {"label": "pdctl.io/deployment=dshare"}
    return {c.name: c.id for c in client.containers.list(filters=labelled)}


def test_a_second_up_leaves_the_other_hosts_container_alone(docker_client, tmp_path: Path):
    spec = docker_spec(tmp_path, "dshare", {"a": "127.0.0.1", "b": "127.0.0.2"}, free_port())
    try:
        checked(pdctl("up", str(spec), "--yes", "--timeout", "60", *urls("a", "b")))
        before = ids(docker_client)
        assert set(before) == {"dshare-serve-0", "dshare-serve-1"}
        again = checked(pdctl("up", str(spec), "--dry-run", *urls("a", "b")))
        assert "stop" not in again.stdout, again.stdout
        checked(pdctl("up", str(spec), "--yes", "--timeout", "60", *urls("a", "b")))
        assert ids(docker_client) == before
        status = pdctl("status", str(spec), *urls("a", "b"))
        assert "2 of 2 units up" in status.stdout, status.stdout
    finally:
        remove_all(docker_client, "dshare")
