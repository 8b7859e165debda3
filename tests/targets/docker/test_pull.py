"""`up --docker-url` pulls an image the engine lacks, as `docker run` over SSH does, from a
tiny registry on 127.0.0.1 (tests/registry.py) holding the stand-in engine
(test_docker.py); the real test dockerd pulls it over plain HTTP (loopback registries are
insecure by default)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pdctl.targets.docker.pull import PullProgress, present, reference
from tests.helpers import checked
from tests.registry import Image, Registry, image_from_rootfs
from tests.targets.docker.bed import docker_spec, remove_all, urls
from tests.targets.docker.test_progress import stage_lines
from tests.targets.docker.test_target import CHANGES, ENTRYPOINT, engine_rootfs, free_port
from tests.targets.testbed import pdctl

REPO = "pdctl-test/pulled"


@pytest.fixture(scope="module")
def image(docker_client) -> Image:
    import shutil

    env = dict(c.split(" ", 1)[1].split("=", 1) for c in CHANGES if c.startswith("ENV "))
    config = {
        "Env": [f"{k}={v}" for k, v in env.items()], "Entrypoint": ENTRYPOINT,
        "Labels": {"pdctl.test": "pulled"},
    }
    busybox = shutil.which("busybox")
    assert busybox is not None
    # A layer of its own (not the local stand-in's): the engine has to download it.
    rootfs = engine_rootfs(busybox, {"pulled": b"served by tests/registry.py\n"})
    return image_from_rootfs(rootfs, config, docker_client.version()["Arch"])


@pytest.fixture(scope="module")
def registry(image: Image):
    reg = Registry()
    reg.add(REPO, "1", image.manifest, image.blobs)
    yield reg
    reg.stop()


def forget(client, ref: str) -> None:
    """Remove `ref` from the engine (so that `up` has to pull it)."""
    import docker

    try:
        client.images.remove(ref, force=True)
    except docker.errors.ImageNotFound:
        pass


def test_up_pulls_a_missing_image_with_progress(
    docker_client, registry, image: Image, tmp_path: Path,
):
    ref = f"127.0.0.1:{registry.port}/{REPO}:1"
    by_digest = f"127.0.0.1:{registry.port}/{REPO}@{image.digest}"
    for r in (ref, by_digest):
        forget(docker_client, r)
    port = free_port()
    spec = docker_spec(tmp_path, "dpull", {"local": "127.0.0.1"}, port, image=ref)
    try:
        up = checked(pdctl("up", str(spec), "--yes", "--timeout", "60", *urls("local")))
        stages = stage_lines(up.stdout, 60)
        pulling = [s for s in stages if s.startswith("dpull-serve-0 on local: pulling image")]
        assert pulling, up.stdout
        # the last report: every layer pulled, and its bytes all downloaded where the stream
        # gave them (dockerd may send a layer this small without a `Downloading` event)
        done = re.search(
            rf"\| pulling {re.escape(ref)}: 1/1 layers(, ([\d.]+)/([\d.]+) MB)?$", pulling[-1]
        )
        assert done and done[2] == done[3], pulling
        assert stages[-1] == "dpull-serve-0 on local: healthy", up.stdout
        assert ("GET", f"/v2/{REPO}/manifests/1") in registry.requests or (
            "HEAD", f"/v2/{REPO}/manifests/1",
        ) in registry.requests, registry.requests
        blobs = {p for m, p in registry.requests if m == "GET" and "/blobs/" in p}
        assert blobs == {f"/v2/{REPO}/blobs/{d}" for d in image.blobs}, registry.requests
        assert docker_client.images.get(ref).attrs["Config"]["Labels"]["pdctl.test"] == "pulled"

        # A digest reference is pulled by its digest. dockerd keeps the manifests it pulled in
        # its own content store and may still hold this one (until its garbage collection
        # runs), so the registry need not see the manifest again; what must hold: pdctl asked
        # for the image (the pulling stage), never by a tag, and the engine has it by digest.
        remove_all(docker_client, "dpull")
        forget(docker_client, ref)
        assert not present(docker_client, by_digest)
        spec = docker_spec(tmp_path, "dpull", {"local": "127.0.0.1"}, port, image=by_digest)
        registry.requests.clear()
        up = checked(pdctl("up", str(spec), "--yes", "--timeout", "60", *urls("local")))
        stages = stage_lines(up.stdout, 60)
        assert f"dpull-serve-0 on local: pulling image | pulling {by_digest}" in stages, up.stdout
        manifests = {p for _, p in registry.requests if "/manifests/" in p}
        assert manifests <= {f"/v2/{REPO}/manifests/{image.digest}"}, registry.requests
        assert docker_client.images.get(by_digest).attrs["RepoDigests"] == [by_digest]
    finally:
        remove_all(docker_client, "dpull")
        for r in (ref, by_digest):
            forget(docker_client, r)


def test_an_image_the_registry_lacks_fails_before_anything_is_replaced(
    docker_client,
    registry,
    tmp_path: Path,
):
    """The running engine stays when the new spec names an image that cannot be pulled: one
    line naming the unit and the image, exit 1, nothing of this run left behind."""
    from tests.targets.docker.test_target import IMAGE

    port = free_port()
    spec = docker_spec(tmp_path, "dnope", {"local": "127.0.0.1"}, port, image=IMAGE)
    try:
        up = checked(pdctl("up", str(spec), "--yes", "--timeout", "60", *urls("local")))
        (before,) = docker_client.containers.list(filters={"label": "pdctl.io/deployment=dnope"})
        missing = f"127.0.0.1:{registry.port}/pdctl-test/nope:1"
        spec = docker_spec(tmp_path, "dnope", {"local": "127.0.0.1"}, port, image=missing)
        up = checked(pdctl("up", str(spec), "--yes", "--timeout", "60", *urls("local")), 1)
        (line,) = up.stderr.strip().splitlines()
        assert f"dnope-serve-0 on local: cannot pull image {missing}" in line, line
        assert ("GET", "/v2/pdctl-test/nope/manifests/1") in registry.requests or (
            "HEAD", "/v2/pdctl-test/nope/manifests/1",
        ) in registry.requests
        (after,) = docker_client.containers.list(
            all=True, filters={"label": "pdctl.io/deployment=dnope"}
        )
        assert (after.id, after.status) == (before.id, "running")
    finally:
        remove_all(docker_client, "dnope")


def test_pull_progress_line_counts_layers_and_bytes():
    """The progress line from the stream's events (the shapes dockerd sends)."""
    p = PullProgress("vllm/vllm-openai:v0.x")
    assert p.line() == "pulling vllm/vllm-openai:v0.x"
    p.update({"status": "Pulling from vllm/vllm-openai", "id": "v0.x"})
    for layer in ("a", "b", "c"):
        p.update({"status": "Pulling fs layer", "progressDetail": {}, "id": layer})
    p.update({"status": "Already exists", "progressDetail": {}, "id": "c"})
    for layer, current, total in (("a", 1_100_000_000, 3_000_000_000),
                                  ("b", 2_000_000_000, 6_800_000_000)):
        detail = {"current": current, "total": total}
        p.update({"status": "Downloading", "progressDetail": detail, "id": layer})
    assert p.line() == "pulling vllm/vllm-openai:v0.x: 1/3 layers, 3.1/9.8 GB"
    p.update({"status": "Download complete", "progressDetail": {}, "id": "a"})
    p.update({"status": "Pull complete", "progressDetail": {}, "id": "a"})
    assert p.line() == "pulling vllm/vllm-openai:v0.x: 2/3 layers, 5.0/9.8 GB"
    assert reference("r.example:5000/a/b@sha256:00") == ("r.example:5000/a/b", "sha256:00")
    assert reference("r.example:5000/a/b") == ("r.example:5000/a/b", "latest")
    assert reference("vllm/vllm-openai:v0.x") == ("vllm/vllm-openai", "v0.x")
