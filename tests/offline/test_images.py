"""`pdctl bundle --images` and `up --bundle` on a docker host, with the real test dockerd
(tests/services.sh): a tiny image built here FROM scratch (never pulled) is saved into the
bundle with its id and sha256, removed from the engine, then loaded again over SSH by the copy
(an sshd whose sessions reach the test dockerd); a second copy finds the id and sends nothing."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import uuid
from pathlib import Path

import pytest

from pdctl.offline import manifest as mf
from pdctl.offline.download import bundle
from pdctl.offline.ship import bundled, ship
from pdctl.plan import make_plan
from pdctl.spec import load_text
from pdctl.targets.ssh import SshOptions
from tests.helpers import pdctl
from tests.sshd import need_root, start_sshd
from tests.targets.testbed import TestHost, host_entry, ssh_env_or_skip, stand_in_spec, write_spec


@pytest.fixture(scope="module")
def engine():
    """The docker library on the test dockerd, and a tiny image of our own tag."""
    url = os.environ.get("PDCTL_TEST_DOCKER_HOST", "")
    if not url or shutil.which("docker") is None:
        pytest.skip("needs the test dockerd (tests/services.sh) and the docker CLI")
    import docker

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
