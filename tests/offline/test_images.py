"""`pdctl bundle --images` and `up --bundle` on a docker host, with the real test dockerd
(tests/services.sh): a tiny image built here FROM scratch (never pulled) is saved into the
bundle with its id and sha256, removed from the engine, then loaded again over SSH by the copy
(an sshd whose sessions reach the test dockerd); a second copy finds the id and sends nothing."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import uuid
from pathlib import Path

import docker
import kubernetes_validate
import pytest

from pdctl.offline import manifest as mf
from pdctl.offline.download import bundle
from pdctl.offline.ship import bundled, ship
from pdctl.plan import make_plan
from pdctl.render.mirror import images
from pdctl.spec import load_text
from pdctl.targets.ssh import SshOptions
from tests.conftest import K8S_VERSION, check_scripts
from tests.helpers import pdctl
from tests.registry import Registry
from tests.sshd import need_root, start_sshd
from tests.targets.testbed import TestHost, host_entry, ssh_env_or_skip, stand_in_spec, write_spec


@pytest.fixture
def engine():
    """The docker library on the test dockerd, and a tiny image of our own tag."""
    url = os.environ.get("PDCTL_TEST_DOCKER_HOST", "")
    if not url or shutil.which("docker") is None:
        pytest.skip("needs the test dockerd (tests/services.sh) and the docker CLI")
    client = docker.DockerClient(base_url=url)
    tag = f"pdctl-test/offline-tiny:{uuid.uuid4().hex[:8]}"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        for name, data in (("Dockerfile", b"FROM scratch\nCOPY hello /hello\n"),
                           ("hello", tag.encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    image, _ = client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True)
    try:
        yield client, url, tag, image.id
    finally:
        for ref in (tag, image.id):
            try:
                client.images.remove(ref, force=True)
            except docker.errors.ImageNotFound:
                pass
        client.close()


def test_the_image_is_saved_loaded_where_missing_and_skipped_where_present(
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    client, url, tag, image_id = engine
    need_root()
    env = ssh_env_or_skip()
    server = start_sshd(env, tmp_path, "dock", extra=f"SetEnv DOCKER_HOST={url}\n")
    try:
        host = TestHost("dock", "127.0.0.1", server.host.port)
        entry = host_entry(env, host, tmp_path, runtime="docker")
        spec_path = write_spec(tmp_path / "spec.yaml", stand_in_spec(
            "offimg", [entry], {"replicas": 1, "port": 18997},
            engine={"device": "cpu", "image": tag, "version": "0.33.0"}))
        plan = make_plan(load_text(spec_path.read_text(), "spec.yaml")[0])
        refused = pdctl("bundle", str(spec_path), "-o", str(tmp_path / "x"))
        assert refused.returncode == 2 and "bundled only with --images" in refused.stderr

        monkeypatch.setenv("DOCKER_HOST", url)
        folder, said = tmp_path / "bundle", []
        made = bundle(plan, (), "", "", folder, said.append, None, (tag,))
        [(ref, got_id, file)] = made.images
        assert (ref, got_id) == (tag, image_id) and file.startswith("images/")
        assert [e.path for e in made.files] == [file] and mf.verify(folder) == made
        with tarfile.open(folder / file) as tar:  # `docker save`'s layout, our tag in it
            assert tag in tar.extractfile("manifest.json").read().decode()
        again = bundle(plan, (), "", "", folder, said.append, None, (tag,))
        assert again == made and said[-1].endswith("already saved"), said

        client.images.remove(tag, force=True)  # the host lacks it now
        ready, _, manifest = bundled(plan, folder)
        options = SshOptions(known_hosts=server.known_hosts)
        [first] = ship(ready, folder, manifest, options)
        assert (first.loaded, first.had, first.sent) == ((tag,), (), 1), first
        assert client.images.get(tag).id == image_id
        [second] = ship(ready, folder, manifest, options)
        assert (second.loaded, second.had, second.sent) == ((), (tag,), 0), second
    finally:
        server.stop()


def test_kubernetes_images_are_listed_by_digest_and_pushed_to_a_mirror_from_the_bundle(
    engine, tmp_path: Path
):
    """An image pushed to a loopback registry (so the engine knows its registry digest) in a
    phase 1 spec: `pdctl bundle --images` lists it pinned by that digest and saves it; the
    image removed, the bundle's mirror.sh loads the tar and pushes it to a second registry;
    render with kubernetes.imageMirror points the pods at it."""
    client, url, tag, image_id = engine
    upstream, mirror = Registry(), Registry()
    repo, version = f"{upstream.host}/{tag.split(':')[0]}", tag.split(":")[1]
    ref = f"{repo}:{version}"
    try:
        client.images.get(tag).tag(repo, version)
        client.images.push(repo, tag=version)
        got = upstream.manifests[(tag.split(":")[0], version)]
        digest = f"sha256:{hashlib.sha256(got).hexdigest()}"  # the registry's digest of it
        spec = tmp_path / "over.yaml"
        spec.write_text(f"engine: {{image: '{ref}'}}\n")
        env = {"DOCKER_HOST": url}
        args = ("examples/phase1-k8s.yaml", "--overlay", str(spec))
        made = pdctl("bundle", *args, "-o", str(tmp_path / "b"), "--images", env=env)
        assert made.returncode == 0 and "images listed: 1" in made.stdout, made.stderr
        listed = (tmp_path / "b" / "images" / "images.txt").read_text().splitlines()
        assert listed[-1] == f"{ref}@{digest}", listed
        manifest = mf.verify(tmp_path / "b")
        assert [(r, i) for r, i, _ in manifest.images] == [(ref, image_id)]
        check_scripts({"mirror.sh": (tmp_path / "b" / "images" / "mirror.sh").read_text()},
                      tmp_path / "sh")

        for name in (ref, tag):
            client.images.remove(name, force=True)
        pushed = subprocess.run(["sh", str(tmp_path / "b" / "images" / "mirror.sh"),
                                 mirror.host], env={**os.environ, **env},
                                capture_output=True, text=True)
        assert pushed.returncode == 0, pushed.stderr
        got = json.loads(mirror.manifests[(tag.split(":")[0], version)])
        assert got["config"]["digest"] == image_id  # the very image the bundle carried

        over = tmp_path / "mirror.yaml"
        over.write_text(f"kubernetes: {{imageMirror: '{mirror.host}'}}\n")
        shown = pdctl("render", *args, "--overlay", str(over), "-o", "json")
        docs = json.loads(shown.stdout)["items"]
        assert images(docs) == (f"{mirror.host}/{tag}",)
        for doc in docs:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    finally:
        upstream.stop()
        mirror.stop()
        with contextlib.suppress(docker.errors.ImageNotFound):
            client.images.remove(ref, force=True)


def test_preflight_bundle_on_docker_hosts_checks_the_engine_the_images_there_and_room(
    engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """Two docker hosts over real SSH: `dock` reaches the test dockerd, `bare` reaches no engine
    (its sessions' DOCKER_HOST is a socket nobody serves)."""
    client, url, tag, image_id = engine
    need_root()
    env = ssh_env_or_skip()
    dock = start_sshd(env, tmp_path, "dock", extra=f"SetEnv DOCKER_HOST={url}\n")
    bare = start_sshd(env, tmp_path, "bare",
                      extra=f"SetEnv DOCKER_HOST=unix://{tmp_path}/nobody.sock\n")
    try:
        known_hosts = tmp_path / "known_hosts"
        known_hosts.write_text("".join(Path(s.known_hosts).read_text() for s in (dock, bare)))
        entries = [host_entry(env, TestHost(n, "127.0.0.1", s.host.port), tmp_path,
                              runtime="docker", instances=1)
                   for n, s in (("dock", dock), ("bare", bare))]
        spec_path = write_spec(tmp_path / "spec.yaml", stand_in_spec(
            "offpre", entries, {"replicas": 2, "port": 18996},
            engine={"device": "cpu", "image": tag, "version": "0.33.0"}))
        plan = make_plan(load_text(spec_path.read_text(), "spec.yaml")[0])
        monkeypatch.setenv("DOCKER_HOST", url)
        folder = tmp_path / "bundle"
        made = bundle(plan, (), "", "", folder, lambda _: None, None, (tag,))
        size = made.files[0].size

        def checks() -> dict[tuple[str, str], dict]:
            done = pdctl("preflight", str(spec_path), "--bundle", str(folder), "-o", "json",
                         "--known-hosts", str(known_hosts))
            assert done.returncode in (0, 1), done.stderr
            return {(f["check"], f["where"]): f for f in json.loads(done.stdout)["findings"]
                    if f["check"].startswith("bundle.")}

        found = checks()
        assert sorted(found) == [("bundle.disk", "dock"), ("bundle.docker", "bare"),
                                 ("bundle.docker", "dock"), ("bundle.index", "offpre")], found
        ok = found[("bundle.docker", "dock")]
        assert ok["status"] == "PASS", ok
        assert ok["found"].endswith("; 1 of 1 bundled images already there"), ok
        assert found[("bundle.disk", "dock")]["found"] == "every bundled image already there"
        no = found[("bundle.docker", "bare")]
        assert no["status"] == "FAIL" and no["found"].startswith("no engine: "), no
        assert "nobody.sock" in no["found"] and "docker group" in no["fix"], no

        client.images.remove(tag, force=True)  # now the bundle's tar has to be loaded
        again = checks()
        assert again[("bundle.docker", "dock")]["found"].endswith(
            "; 0 of 1 bundled images already there")
        room = again[("bundle.disk", "dock")]
        assert room["status"] == "PASS" and " free on " in room["found"], room
        assert room["expected"].startswith(
            f">= {size / 2**30:.1f} GiB free in dataDir (the largest tar, copied one at a time) "
            f"and >= {size / 2**30:.1f} GiB where the engine keeps its images (1 to load)"), room
    finally:
        dock.stop()
        bare.stop()
