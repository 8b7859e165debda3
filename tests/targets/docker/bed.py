"""What the docker target tests (`--docker-url`) share: a spec of stand-in engines on docker
hosts, the `--docker-url` arguments, and the removal of a deployment's containers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from tests.targets.testbed import free_port, write_spec

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
