"""The docker SDK target against the real dockerd (tests/services.sh), with a stand-in engine
image built locally from busybox-static (no registry is reachable)."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
from pathlib import Path
from threading import Event

import pytest

from pdctl.errors import PdctlError
from pdctl.plan.model import Unit
from pdctl.render.container import Container, container
from pdctl.render.host import unit_hash
from pdctl.spec.model import Host
from pdctl.targets.docker.engine import Engine, docker_home, host_path
from pdctl.targets.docker.target import Engines
from pdctl.targets.docker.transport import DockerAccess
from pdctl.targets.hosts.health_wait import HealthWait
from pdctl.targets.outcome import Outcome, UpFailed
from pdctl.targets.state import Change, Desired, diff
from tests.helpers import checked
from tests.targets.docker.bed import IMAGE, docker_spec, urls
from tests.targets.testbed import free_port

ENGINE_SH = (Path(__file__).parents[1] / "data" / "standin-engine.sh").read_text()


def add(
    tar: tarfile.TarFile, name: str, data: bytes = b"", mode: int = 0o755,
    kind: bytes = tarfile.REGTYPE, link: str = "",
) -> None:
    info = tarfile.TarInfo(name)
    info.mode, info.type, info.linkname, info.size = mode, kind, link, len(data)
    tar.addfile(info, io.BytesIO(data) if data else None)


ENTRYPOINT = ["/bin/sh", "/engine.sh"]
CHANGES = ["ENV PATH=/bin", f"ENTRYPOINT {json.dumps(ENTRYPOINT)}", "LABEL pdctl.test=engine"]


def engine_rootfs(
    busybox: str, extra: dict[str, bytes] | None = None,
    tools: tuple[str, ...] = ("sh", "httpd", "mkdir", "printf", "echo", "cat", "sleep"),
    scripts: dict[str, str] | None = None,
) -> bytes:
    """A stand-in's root filesystem as a tar: busybox as `tools`, the executable `scripts` (the
    stand-in's engine.sh unless given) and `extra` files; the same bytes every run (fixed
    mtimes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for d in ("bin", "tmp", "proc", "sys", "dev", "etc", "www"):
            add(tar, d, kind=tarfile.DIRTYPE)
        with open(busybox, "rb") as fh:
            add(tar, "bin/busybox", fh.read())
        for tool in tools:
            add(tar, f"bin/{tool}", kind=tarfile.SYMTYPE, link="busybox")
        for name, text in (scripts or {"engine.sh": ENGINE_SH}).items():
            add(tar, name, text.encode())
        for name, data in (extra or {}).items():
            add(tar, name, data, mode=0o644)
    return buf.getvalue()


def import_once(client, rootfs: bytes, repo: str, changes: list[str]) -> str:
    """`rootfs` imported once per content: tagged repo:c-<digest of the rootfs and the image
    settings>, and a run whose image is already there imports nothing. Returns that tag."""
    import docker

    digest = hashlib.sha256(rootfs + json.dumps(changes).encode()).hexdigest()[:16]
    try:
        client.images.get(f"{repo}:c-{digest}")
    except docker.errors.ImageNotFound:
        client.api.import_image_from_data(rootfs, repository=repo, tag=f"c-{digest}",
                                          changes=changes)
    return f"{repo}:c-{digest}"


def ensure_engine_image(client, rootfs: bytes) -> str:
    """The stand-in imported once per content (import_once) and tagged IMAGE. Returns the
    content's tag."""
    repo, tag = IMAGE.split(":")
    content_tag = import_once(client, rootfs, repo, CHANGES)
    # the name the tests use (moves from an older content's image)
    client.images.get(content_tag).tag(repo, tag)
    remove_stale_engine_images(client)
    return content_tag


def remove_stale_engine_images(client) -> None:
    """Untagged copies of the stand-in (older runs re-imported it each time); only ours:
    dangling images with the stand-in's entrypoint, none in use by a container."""
    import docker

    for image in client.images.list(filters={"dangling": True}):
        config = image.attrs.get("Config") or {}
        if config.get("Entrypoint") != ENTRYPOINT:
            continue
        try:
            client.images.remove(image.id)
        except docker.errors.APIError:
            pass  # a container still uses it


def test_engine_image_is_imported_once_per_content(docker_client):
    """A second run with the same stand-in imports nothing and leaves no untagged copies."""
    before = {i.id for i in docker_client.images.list(all=True)}
    content_tag = ensure_engine_image(docker_client, engine_rootfs(shutil.which("busybox")))
    assert {i.id for i in docker_client.images.list(all=True)} <= before
    assert docker_client.images.get(content_tag).id == docker_client.images.get(IMAGE).id
    dangling = docker_client.images.list(filters={"dangling": True})
    stale = [i for i in dangling if (i.attrs.get("Config") or {}).get("Entrypoint") == ENTRYPOINT]
    assert stale == []


DATA = "/tmp/pdctl-test-data"
HOST = Host(
    name="local", address="127.0.0.1", runtime="docker", hfCache="/tmp/pdctl-test-hf", dataDir=DATA
)


def boxed(u: Unit, deployment: str, secret_env: tuple[str, ...] = (), model=None) -> Container:
    """`u` as render makes its container (render/container.py): on the host's network, the
    test dockerd having no bridge."""
    folder = f"{u.host.data_dir}/{deployment}/{u.name}"
    return container(u, unit_hash(u), deployment, folder, secret_env, model)


def unit(
    deployment: str, name: str, port: int, model: str = "tiny", gpus: tuple[int, ...] = ()
) -> Container:
    u = Unit(
        name=name, role="serve", host=HOST, port=port,
        command=(model, "--port", str(port), "--served-model-name", "tiny"),
        env=(("VLLM_LOGGING_LEVEL", "INFO"),), setup="", image=IMAGE, gpus=gpus,
    )
    return boxed(u, deployment, ("HF_TOKEN",))


def changes(engine: Engine, units: list[Container]) -> list[Change]:
    """What `up` does to each container and to the engine's others (the hosts' state.diff)."""
    return diff([Desired(HOST, u.name, "serve", u.hash, None) for u in units], engine.observe())


def wait(engine: Engine, units: list[tuple[str, int]], timeout: float) -> None:
    """`up`'s health wait (the hosts') over this one engine: UpFailed names what failed."""
    fleet = Engines(None, {}, DockerAccess(), {}, ops={HOST.name: engine})  # type: ignore[arg-type]
    ask = [Desired(HOST, name, "serve", "", port) for name, port in units]
    failures, _ = HealthWait(fleet, {}, "tiny", print, print, timeout).wait_healthy(ask, Event())
    if failures:
        raise UpFailed(Outcome(failures))


@pytest.fixture
def target(docker_client, request):
    tgt = Engine(
        docker_client, f"t-{request.node.name[:40].replace('_', '-')}", stop_seconds=1,
        where=HOST.name,
    )  # the stand-in ends on TERM; 1 s bounds a stuck one
    yield tgt
    tgt.down()


def test_up_creates_labelled_containers_and_is_idempotent(target):
    port = free_port()
    units = [unit(target.deployment, f"{target.deployment}-serve-0", port)]
    planned = changes(target, units)
    assert [c.action for c in planned] == ["start"]
    target.apply(units, planned, {"HF_TOKEN": "hf_docker_secret"})
    wait(target, [(units[0].name, port)], 60)
    (c,) = target.containers()
    assert c.labels["pdctl.io/deployment"] == target.deployment
    assert c.labels["pdctl.io/role"] == "serve"
    assert len(c.labels["pdctl.io/hash"]) == 16
    assert c.attrs["HostConfig"]["IpcMode"] == "host"
    # dockerd copies a container's output into its log on its own, after the engine wrote it:
    # healthy does not mean the line is in the log yet. Follow the log until it is (the
    # stream ends if the container does), then read it through pdctl's tail.
    seen = b""
    for chunk in c.logs(stream=True, follow=True):
        seen += chunk
        if b"stand-in engine serving tiny" in seen:
            break
    assert "stand-in engine serving tiny" in target.tail(c.name)
    # the secret is an env var of the container, never a command-line argument
    assert "hf_docker_secret" not in " ".join(c.attrs["Config"]["Cmd"])
    assert [ch.action for ch in changes(target, units)] == ["keep"]


def test_spec_change_replaces_only_the_changed_container(target):
    p0, p1 = free_port(), free_port()
    units = [
        unit(target.deployment, f"{target.deployment}-a", p0),
        unit(target.deployment, f"{target.deployment}-b", p1),
    ]
    target.apply(units, changes(target, units), {})
    ids = {c.name: c.id for c in target.containers()}
    changed = [units[0], unit(target.deployment, f"{target.deployment}-b", p1, model="tiny2")]
    planned = changes(target, changed)
    assert [c.action for c in planned] == ["keep", "restart"]
    target.apply(changed, planned, {})
    after = {c.name: c.id for c in target.containers()}
    assert after[units[0].name] == ids[units[0].name]
    assert after[units[1].name] != ids[units[1].name]


def test_removed_unit_is_stopped_and_down_removes_all(target):
    units = [unit(target.deployment, f"{target.deployment}-{n}", free_port()) for n in "ab"]
    target.apply(units, changes(target, units), {})
    planned = changes(target, units[:1])
    assert [c.action for c in planned] == ["keep", "stop"]
    target.apply(units[:1], planned, {})
    assert [c.name for c in target.containers()] == [units[0].name]
    assert target.down() == [units[0].name]
    assert target.containers() == []
    assert target.down() == []


def test_engine_that_exits_is_reported_with_its_error(target):
    name, port = f"{target.deployment}-bad", free_port()
    units = [unit(target.deployment, name, port, model="/missing/model")]
    target.apply(units, changes(target, units), {})
    with pytest.raises(PdctlError, match="model path /missing/model does not exist"):
        wait(target, [(name, port)], 60)
    target.rollback()
    assert target.containers() == []


def test_gpu_request_without_gpus_fails_cleanly(target):
    name = f"{target.deployment}-gpu"
    units = [unit(target.deployment, name, free_port(), gpus=(0,))]
    with pytest.raises(PdctlError, match="did not start"):
        target.apply(units, changes(target, units), {})
    assert target.containers() == []  # the Created container was removed


def test_docker_home_is_known_for_a_local_socket_and_asked_for_otherwise(docker_client):
    url = os.environ["PDCTL_TEST_DOCKER_HOST"]
    assert docker_home(docker_client, url) == os.path.expanduser("~")
    assert docker_home(docker_client, "tcp://10.0.0.1:2375") is None
    assert host_path("~/.cache/huggingface", "/home/u", "hfCache") == "/home/u/.cache/huggingface"
    with pytest.raises(PdctlError, match="give an absolute path"):
        host_path("~/.cache/huggingface", None, "host a: hfCache")


def test_foreign_container_is_never_touched(target, docker_client):
    name = f"{target.deployment}-x"
    other = docker_client.containers.create(IMAGE, ["tiny"], name=name)
    try:
        with pytest.raises(PdctlError, match="did not create"):
            target.apply(
                [unit(target.deployment, name, free_port())],
                changes(target, [unit(target.deployment, name, 1)]), {},
            )
        assert target.down() == []
        assert docker_client.containers.get(name).id == other.id
    finally:
        other.remove(force=True)


def test_cli_up_status_down_through_the_sdk(docker_client, tmp_path):
    """`pdctl up --docker-url HOST=URL`: the same plan, containers made by the docker SDK."""

    from tests.targets.testbed import pdctl

    port = free_port()
    model = tmp_path / "model"  # a model given as a host path is mounted read-only
    # the test dockerd has no bridge: `network: host`; the default HF cache
    spec = docker_spec(tmp_path, "sdk", port=port, host={"hfCache": None})
    url = urls("local")
    up = pdctl("up", str(spec), "--yes", "--timeout", "60", *url)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"http://127.0.0.1:{port}/v1" in up.stdout
        again = pdctl("up", str(spec), "--yes", *url)
        assert "nothing to change" in again.stdout, again.stdout + again.stderr
        # Nothing to change still checks health and says where to send requests.
        assert f"http://127.0.0.1:{port}/v1" in again.stdout, again.stdout
        # On the host's network nothing is published: the engine itself listens on the
        # spec's port (with `network: bridge` it would be told 8000, mapped from the port).
        (c,) = docker_client.containers.list(filters={"label": "pdctl.io/deployment=sdk"})
        cmd = c.attrs["Config"]["Cmd"]
        assert cmd[cmd.index("--port") + 1] == str(port), cmd
        assert c.attrs["HostConfig"]["NetworkMode"] == "host"
        # Switching to the bridge network restarts the engine (its ports change).
        host_network = spec.read_text()
        spec.write_text(host_network.replace("network: host", "network: bridge"))
        planned = pdctl("up", str(spec), "--dry-run", *url)
        assert "spec changed" in planned.stdout, planned.stdout + planned.stderr
        spec.write_text(host_network)
        status = pdctl("status", str(spec), "-o", "json", *url)
        assert '"unit": "sdk-serve-0"' in status.stdout and '"state": "running"' in status.stdout
        # logs reads the container's log through the same target as up and status.
        checked(pdctl("logs", str(spec), "sdk-serve-0", "-n", "5", *url))
        missing = pdctl("logs", str(spec), "nope", *url)
        assert missing.returncode == 2 and "no unit 'nope'" in missing.stderr, missing.stderr
        (c,) = docker_client.containers.list(filters={"label": "pdctl.io/deployment=sdk"})
        mounts = {m["Destination"]: (m["Source"], m["RW"]) for m in c.attrs["Mounts"]}
        assert mounts == {
            "/pdctl/unit": (str(tmp_path / "data/sdk/sdk-serve-0"), True),
            "/root/.cache/huggingface": (os.path.expanduser("~/.cache/huggingface"), True),
            str(model): (str(model), False),
        }
    finally:
        down = pdctl("down", str(spec), *url)
    assert down.returncode == 0, down.stderr
    assert "removed container sdk-serve-0 on local" in down.stdout
    left = docker_client.containers.list(all=True, filters={"label": "pdctl.io/deployment=sdk"})
    assert left == []
