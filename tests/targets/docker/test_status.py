"""`status` and `logs` through the docker SDK (`--docker-url`) say what they say over SSH: each
running engine's health and served model (probed as `up` probes it, with the API key when
`secrets.apiKey` is set), every unit the spec plans (`not started` without a container),
containers of the deployment that the spec no longer plans (`(not in spec)`), and for `logs`
of a unit without a container the SSH target's one line, exit 1.

Against the real test dockerd with the stand-in engine of test_docker.py; the API key test
uses a second stand-in that enforces the key as vLLM does (401 on /v1/* without
`Authorization: Bearer <key>`, the key read from VLLM_API_KEY).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
from pathlib import Path

import pytest
import yaml

from pdctl.targets.health import probe
from tests.helpers import checked
from tests.targets.docker.bed import docker_spec, remove_all, urls
from tests.targets.docker.test_target import IMAGE, engine_rootfs, import_once
from tests.targets.testbed import pdctl

KEY = "sk-pdctl-docker-key-5d2a91"
AUTH_REPO = "pdctl-test/auth-engine"

# Serves /health openly and /v1/models only with `Authorization: Bearer $VLLM_API_KEY` (when
# the variable is set), one request per connection through busybox nc.
DATA = Path(__file__).parents[1] / "data"
AUTH_ENGINE = (DATA / "auth-engine.sh").read_text()
ANSWER = (DATA / "auth-answer.sh").read_text()  # answers one request
AUTH_CHANGES = ["ENV PATH=/bin", 'ENTRYPOINT ["/bin/sh", "/engine.sh"]', "LABEL pdctl.test=auth"]


@pytest.fixture(scope="module")
def auth_image(docker_client) -> str:
    """The key-enforcing stand-in, imported once per content (tagged by its digest)."""
    scripts = {"engine.sh": AUTH_ENGINE, "answer.sh": ANSWER}
    busybox = shutil.which("busybox") or ""
    rootfs = engine_rootfs(busybox, tools=("sh", "nc", "printf", "echo"), scripts=scripts)
    return import_once(docker_client, rootfs, AUTH_REPO, AUTH_CHANGES)


def spec_file(tmp: Path, name: str, replicas: int = 1, image: str = IMAGE, **sections) -> Path:
    """A phase 0 spec of `replicas` stand-in engines on the one docker host `local`, serving
    the model `stand-in`."""
    host = {"instances": replicas} if replicas > 1 else {}
    model = {"name": "stand-in", "servedName": "stand-in"}
    return docker_spec(tmp, name, image=image, host=host, listen=False, replicas=replicas,
                       model=model, **sections)


def url() -> list[str]:
    return urls("local")


def status_json(spec: Path, env: dict[str, str] | None = None) -> dict:
    out = checked(pdctl("status", str(spec), "-o", "json", *url(), env=env))
    return json.loads(out.stdout)


def rows(doc: dict) -> list[tuple[str, str, str, str]]:
    return [(r["unit"], r["state"], r["health"], r["model"]) for r in doc["instances"]]


def test_status_probes_each_engines_health_and_model(docker_client, tmp_path):
    """A running engine is up only when it answers as `up` requires: healthy with its model;
    one whose model is no longer listed reads why, and is not counted up."""
    spec = spec_file(tmp_path, "dkst")
    try:
        checked(pdctl("up", str(spec), "--yes", "--timeout", "60", *url()))
        doc = status_json(spec)
        assert rows(doc) == [("dkst-serve-0", "running", "healthy", "stand-in")]
        assert (doc["summary"]["units"], doc["summary"]["up"]) == (1, 1)
        table = pdctl("status", str(spec), *url())
        assert "healthy" in table.stdout and "stand-in" in table.stdout, table.stdout
        assert "1 of 1 unit up" in table.stdout, table.stdout
        # The engine goes on answering /health but stops listing the model.
        (c,) = docker_client.containers.list(filters={"label": "pdctl.io/deployment=dkst"})
        models = '{"object":"list","data":[{"id":"other","object":"model"}]}'
        done = c.exec_run(["sh", "-c", f"printf '%s' '{models}' > /www/v1/models"])
        assert done.exit_code == 0, done.output
        doc = status_json(spec)
        why = "model 'stand-in' not listed (got ['other'])"
        assert rows(doc) == [("dkst-serve-0", "running", why, "other")]
        assert (doc["summary"]["units"], doc["summary"]["up"]) == (1, 0)
        table = pdctl("status", str(spec), *url())
        assert "0 of 1 unit up" in table.stdout, table.stdout
    finally:
        remove_all(docker_client, "dkst")


def test_status_sends_the_api_key_of_the_running_engine(
    docker_client,
    auth_image,
    tmp_path,
):
    """With secrets.apiKey the engines refuse /v1/models without the key: `status` (which reads
    no secrets from the environment) probes with the key the container runs with, and the key
    is in no command line and in none of pdctl's output."""
    spec = spec_file(
        tmp_path, "dkkey", image=auth_image, secrets={"apiKey": {"env": "PDCTL_TEST_API_KEY"}}
    )
    try:
        up = pdctl(
            "up", str(spec), "--yes", "--timeout", "60", *url(), env={"PDCTL_TEST_API_KEY": KEY}
        )
        assert up.returncode == 0, up.stdout + up.stderr
        env = {k: v for k, v in os.environ.items() if k != "PDCTL_TEST_API_KEY"}
        out = checked(pdctl("status", str(spec), "-o", "json", *url(), env=env, subprocess=True))
        assert rows(json.loads(out.stdout)) == [("dkkey-serve-0", "running", "healthy", "stand-in")]
        assert KEY not in out.stdout + out.stderr
        (c,) = docker_client.containers.list(filters={"label": "pdctl.io/deployment=dkkey"})
        assert KEY not in " ".join(c.attrs["Config"]["Cmd"])
        # The engine does refuse a probe without the key.
        port = yaml.safe_load(spec.read_text())["serve"]["port"]
        opener = lambda: socket.create_connection(("127.0.0.1", port), timeout=5)  # noqa: E731
        assert "401" in probe(opener, "stand-in").detail
        assert probe(opener, "stand-in", api_key=KEY).ok
    finally:
        remove_all(docker_client, "dkkey")


def test_status_lists_planned_units_not_started_and_containers_not_in_spec(
    docker_client,
    tmp_path,
):
    """Before `up` (or after `down`) every unit the spec plans is listed `not started`; a
    container of the deployment that the spec does not plan is listed `(not in spec)`."""
    spec = spec_file(tmp_path, "dkns", replicas=2)
    try:
        doc = status_json(spec)
        assert rows(doc) == [
            ("dkns-serve-0", "not started", "-", ""), ("dkns-serve-1", "not started", "-", ""),
        ]
        assert [r["pid"] for r in doc["instances"]] == ["-", "-"]
        assert all(r["endpoint"].startswith("http://127.0.0.1:") for r in doc["instances"])
        table = pdctl("status", str(spec), *url())
        assert "0 of 2 units up (serve 0/2)" in table.stdout, table.stdout
        labels = {"pdctl.io/deployment": "dkns", "pdctl.io/unit": "dkns-serve-7"}
        labels["pdctl.io/role"] = "serve"
        old = docker_client.containers.create(IMAGE, ["stand-in"], name="dkns-serve-7",
                                              labels=labels)
        doc = status_json(spec)
        assert rows(doc)[-1] == ("dkns-serve-7", "stopped (not in spec)", "-", "")
        assert doc["instances"][-1]["pid"] == old.short_id
        assert [r[1] for r in rows(doc)[:2]] == ["not started", "not started"]
    finally:
        remove_all(docker_client, "dkns")


NO_CONTAINER = "dklg-serve-0, dklg-serve-1 on local: no log (not started, or removed by down)"


@pytest.mark.parametrize("follow", [[], ["-f"]], ids=["tail", "follow"])
def test_logs_without_containers_say_so_in_one_line(docker_client, tmp_path, follow):
    """Nothing of the deployment has a container: `logs` says so (exit 1; -f of every unit is
    the SSH target's usage error, exit 2); a unit the spec plans has no log (exit 1, the SSH
    target's words); only a name the spec does not plan is a usage error (exit 2) that lists
    the spec's units."""
    spec = spec_file(tmp_path, "dklg", replicas=2)
    every = pdctl("logs", str(spec), *follow, *url())
    assert (every.returncode, every.stdout) == (2 if follow else 1, ""), every
    one_unit = "error: -f follows one unit: name it (see `pdctl status`)"
    assert every.stderr.strip().splitlines() == [one_unit if follow else "error: " + NO_CONTAINER]
    one = pdctl("logs", str(spec), "dklg-serve-1", *follow, *url())
    assert (one.returncode, one.stdout) == (1, ""), one
    no_log = "dklg-serve-1 on local: no log (not started, or removed by down)"
    assert one.stderr.strip().splitlines() == [f"error: {no_log}"]
    other = checked(pdctl("logs", str(spec), "nope", *follow, *url()), 2)
    assert other.stderr.strip().splitlines() == [
        "error: no unit 'nope' in 'dklg' (units: dklg-serve-0, dklg-serve-1)"
    ]


def test_logs_of_every_unit_show_the_ones_with_a_container(docker_client, tmp_path):
    """Without UNIT, a unit without a container does not hide the others' logs."""
    spec = spec_file(tmp_path, "dklh", replicas=2)
    try:
        labels = {"pdctl.io/deployment": "dklh", "pdctl.io/unit": "dklh-serve-1"}
        labels["pdctl.io/role"] = "serve"
        c = docker_client.containers.run(IMAGE, name="dklh-serve-1", labels=labels, detach=True,
                                         entrypoint=["/bin/sh", "-c", "echo first; echo second"])
        c.wait(timeout=60)
        out = checked(pdctl("logs", str(spec), *url()))
        assert out.stdout.splitlines() == [
            "==> dklh-serve-0 on local <==", "(no log: not started, or removed by down)",
            "==> dklh-serve-1 on local <==", "first", "second",
        ]
        one = pdctl("logs", str(spec), "dklh-serve-1", *url())
        assert (one.returncode, one.stdout) == (0, "first\nsecond\n"), one
    finally:
        remove_all(docker_client, "dklh")
