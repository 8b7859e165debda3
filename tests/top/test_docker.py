"""`pdctl top --docker-url HOST=URL`: a phase 0 deployment `up` made through the docker SDK,
read from its containers on the real test dockerd (tests/services.sh). The stand-in engine
(tests/targets/docker/test_target.py: busybox httpd) serves a recorded vLLM /metrics put into the
container with the Docker API (tests/top/data/phase0-*.prom, from the real CPU engine)."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
import yaml

from pdctl.cli.specfile import load
from pdctl.targets.base import Connect
from pdctl.top.metrics import parse
from pdctl.top.source import open_source
from tests.helpers import checked
from tests.targets.docker.test_target import IMAGE, free_port
from tests.targets.testbed import pdctl

DATA = Path(__file__).parent / "data"


def serve_metrics(container, name: str) -> None:
    body = (DATA / name).read_bytes()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("metrics")
        info.size, info.mode = len(body), 0o644
        tar.addfile(info, io.BytesIO(body))
    assert container.put_archive("/www", buf.getvalue())


def counter(name: str, metric: str) -> float:
    return parse((DATA / name).read_text(), 0).total(metric) or 0.0


@pytest.fixture(scope="module")
def deployed(docker_client, tmp_path_factory):
    port = free_port()
    data = tmp_path_factory.mktemp("topdocker")
    model = data / "model"
    model.mkdir()
    spec = data / "spec.yaml"
    spec.write_text(
        yaml.safe_dump(
            {
                "name": "topsdk",
                "phase": 0,
                "model": {"name": str(model), "servedName": "tiny"},
                "engine": {"device": "cpu", "image": IMAGE},
                "hosts": [
                    {
                        "name": "local",
                        "address": "127.0.0.1",
                        "runtime": "docker",
                        "network": "host",  # the test dockerd has no bridge
                        "dataDir": str(data / "data"),
                    }
                ],
                "serve": {"port": port, "maxNumSeqs": 64},
            }
        )
    )
    url = ["--docker-url", f"local={os.environ['PDCTL_TEST_DOCKER_HOST']}"]
    checked(pdctl("up", str(spec), "--yes", "--timeout", "60", *url))
    (container,) = docker_client.containers.list(filters={"label": "pdctl.io/deployment=topsdk"})
    try:
        yield spec, url, container
    finally:
        checked(pdctl("down", str(spec), *url))


def test_top_once_json_reads_the_containers_metrics(deployed):
    spec, url, container = deployed
    serve_metrics(container, "phase0-after.prom")
    res = checked(pdctl("top", str(spec), "--once", "--window", "1s", "-o", "json", *url))
    doc = json.loads(res.stdout)
    (row,) = doc["instances"]
    assert row["name"] == "topsdk-serve-0" and row["where"] == "local"
    assert row["error"] is None and row["max_num_seqs"] == 64
    after = "phase0-after.prom"
    assert row["totals"]["requests"] == counter(after, "vllm:request_success_total")
    assert row["totals"]["prompt_tokens"] == counter(after, "vllm:prompt_tokens_total")
    # the stand-in container has no python3: the GPU probe inside it fails, and says so
    (why,) = doc["gpu_missing"]
    assert why.startswith("local: ") and "topsdk-serve-0" in why, why


def test_a_window_between_two_scrapes_has_the_engines_deltas(deployed):
    spec, url, container = deployed
    plan, bundle = load(str(spec), None, None)
    source = open_source(plan, bundle, Connect(docker_urls={"local": url[1].split("=", 1)[1]}))
    try:
        serve_metrics(container, "phase0-before.prom")
        first = source.scrape()
        serve_metrics(container, "phase0-after.prom")
        last = source.scrape()
    finally:
        source.close()
    (f,) = source.window(first, last, [], []).instances
    metric = "vllm:request_success_total"
    assert f.requests == counter("phase0-after.prom", metric) - counter(
        "phase0-before.prom", metric
    )
    assert f.requests > 0


def test_a_stopped_container_is_a_row_with_the_reason_and_exit_1(deployed):
    spec, url, container = deployed
    container.stop(timeout=1)
    try:
        res = checked(pdctl("top", str(spec), "--once", "--window", "1s", "-o", "json", *url), 1)
        (row,) = json.loads(res.stdout)["instances"]
        assert row["error"] == "container topsdk-serve-0: exited", row
        assert "topsdk-serve-0: container topsdk-serve-0: exited" in res.stderr
    finally:
        container.start()
