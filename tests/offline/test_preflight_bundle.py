"""`preflight --bundle DIR` (pdctl/preflight/bundle.py): on the real sshd test host lo1
(tests/services.sh), the host's Python against the bundle's (FAIL with the `pdctl bundle
--python` that fits, then PASS with it), its glibc and machine against the platform tag, its
free space in dataDir; the scripts rendered for the bundle install with --no-index only; a
damaged bundle is refused before anything connects. The checks themselves on recorded lines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pdctl.offline import manifest as mf
from pdctl.plan import make_plan
from pdctl.preflight import bundle
from pdctl.preflight.facts import SSH
from pdctl.render import render
from pdctl.spec import load_text
from pdctl.spec.model import Host
from tests.helpers import known, pdctl
from tests.offline.test_ship import spec_file

LINES = "from python3\npython 3.12\nglibc glibc 2.36\nmachine x86_64\nfree {free}\nmount /\n"


def made(folder: Path, python: str, platform: str, pips: tuple[str, ...]) -> None:
    (folder / mf.WHEELS).mkdir(parents=True, exist_ok=True)
    (folder / mf.WHEELS / "a-1.0-py3-none-any.whl").write_bytes(b"a" * 1000)
    mf.write(folder, mf.Manifest("0", "spec", python, platform, (("engines", pips),),
                                 mf.entries(folder)))


def preflight(ssh_env, spec: Path, folder: Path):
    result = pdctl("preflight", str(spec), "--bundle", str(folder), "-o", "json",
                   "--no-transfer", *known(ssh_env))
    assert result.returncode in (0, 1), result.stderr
    return {f["check"]: f for f in json.loads(result.stdout)["findings"]
            if f["check"].startswith("bundle.")}


def test_the_hosts_python_platform_and_disk_against_the_bundle(ssh_env, tmp_path):
    spec = spec_file(ssh_env, tmp_path)
    plan = make_plan(load_text(spec.read_text(), "spec.yaml")[0])
    folder = tmp_path / "bundle"
    made(folder, "3.0", "manylinux_2_17_x86_64", (plan.release.pip,))
    found = preflight(ssh_env, spec, folder)
    assert sorted(found) == ["bundle.disk", "bundle.index", "bundle.platform", "bundle.python"]
    py = found["bundle.python"]
    assert py["status"] == "FAIL" and py["where"] == "lo1", py
    have = re.search(r"--python (3\.\d+) --platform manylinux_2_17_x86_64$", py["fix"])
    assert have and py["found"].startswith(f"Python {have.group(1)} (python3)"), py
    assert found["bundle.platform"]["status"] == "PASS", found["bundle.platform"]
    assert found["bundle.disk"]["status"] == "PASS" and " free on " in found["bundle.disk"]["found"]
    assert found["bundle.index"]["status"] == "PASS", found["bundle.index"]
    made(folder, have.group(1), "manylinux_2_17_aarch64", (plan.release.pip,))
    again = preflight(ssh_env, spec, folder)
    assert again["bundle.python"]["status"] == "PASS", again["bundle.python"]
    plat = again["bundle.platform"]
    assert plat["status"] == "FAIL" and plat["found"].endswith(", x86_64"), plat


def test_a_damaged_bundle_is_refused_before_preflight_connects(ssh_env, tmp_path):
    spec = spec_file(ssh_env, tmp_path)
    folder = tmp_path / "bundle"
    made(folder, "3.11", "manylinux_2_28_x86_64", ("vllm==0.33.0",))
    (folder / mf.WHEELS / "a-1.0-py3-none-any.whl").write_bytes(b"b" * 1000)
    result = pdctl("preflight", str(spec), "--bundle", str(folder), *known(ssh_env))
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {folder}/wheels/a-1.0-py3-none-any.whl: sha256 differs from the manifest; "
        "the bundle is corrupted or incomplete; run `pdctl bundle SPEC -o DIR` again"]


HOST = make_plan(load_text((Path(__file__).parents[2] / "examples" / "phase2-nixl-hosts.yaml")
                           .read_text(), "x")[0]).spec.hosts[0]


@pytest.mark.parametrize(
    ("platform", "size", "weights", "check", "status", "says"),
    [
        ("manylinux_2_28_x86_64", 1 << 30, 0, "bundle.platform", "PASS", "glibc 2.28 or newer"),
        ("manylinux_2_39_x86_64", 1 << 30, 0, "bundle.platform", "FAIL", "manylinux_2_36_x86_64"),
        ("manylinux2014_x86_64", 1 << 30, 0, "bundle.platform", "PASS", "glibc 2.17 or newer"),
        ("macosx_11_0_arm64", 1 << 30, 0, "bundle.platform", "FAIL", "not a Linux wheel"),
        ("manylinux_2_28_x86_64", 4 << 30, 0, "bundle.disk", "FAIL", "hosts[0].dataDir"),
        ("manylinux_2_28_x86_64", 3 << 30, 0, "bundle.disk", "PASS", ">= 9.0 GiB free"),
        ("manylinux_2_28_x86_64", 3 << 30, 2 << 30, "bundle.disk", "FAIL", "2.0 GiB of weights"),
    ],
)
def test_the_checks_on_recorded_lines(platform, size, weights, check, status, says):
    raw = {bundle.FILE: LINES.format(free=10 << 20)}  # 10 GiB free
    want = bundle.Wanted("3.12", platform, size, "b/", weights)
    got = {f.check: f for f in bundle.host_findings(HOST, 0, raw, want)}[check]
    assert got.status == status and says in f"{got.expected} {got.fix}", got


def test_what_an_earlier_up_left_in_the_bundle_folder_needs_no_room():
    """`down` keeps the bundle's files: a host holding them from the last `up --bundle` needs
    room only for what is not there yet. A file counts as there with the manifest's path and
    size; one of another size (a new revision's shard under the same name) is sent beside the
    old one, so it needs its room."""
    shard, wheel = ("weights/model-00001-of-00001.safetensors", 4 << 30), ("wheels/a.whl", 1 << 20)
    want = bundle.Wanted("3.12", "manylinux_2_28_x86_64", 1 << 20, "b/", 4 << 30,
                         files=(wheel, shard))
    lines = LINES.format(free=3 << 20)  # 3 GiB free

    def disk(extra: str):
        raw = {bundle.FILE: lines + extra}
        return {f.check: f for f in bundle.host_findings(HOST, 0, raw, want)}["bundle.disk"]

    assert disk("").status == "FAIL"
    kept = disk(f"held {shard[1]} {shard[0]}\nheld {wheel[1]} {wheel[0]}\n")
    assert kept.status == "PASS", kept
    assert kept.expected == (
        ">= 0.0 GiB free (0.0 GiB of wheels, unpacked into the environments; 4.0 GiB of "
        "weights; less 4.0 GiB already there)")
    other = disk(f"held {shard[1] - 8} {shard[0]}\nheld 5 weights/stale.bin\n")
    assert other.status == "FAIL" and "already there" not in other.expected, other
    assert bundle.parse(lines + "held 12 weights/a b.bin\n").held == (("weights/a b.bin", 12),)


def test_a_script_that_reaches_an_index_fails():
    assert bundle.no_index("x", ["pip install --no-index --find-links /w vllm==1"]).status == "PASS"
    bad = bundle.no_index("x", ["pip install --no-index --find-links /w a", "pip install b"])
    assert bad.status == "FAIL" and bad.found == "needs an index: pip install b"


def test_a_host_without_the_file_warns_and_a_damaged_one_is_no_crash():
    want = bundle.Wanted("3.12", "manylinux_2_28_x86_64", 1, "b/")
    assert [f.status for f in bundle.host_findings(HOST, 0, {}, want)] == ["WARN"]
    with pytest.raises(ValueError):
        bundle.parse("garbage")


DOCKER = ("free {free}\nmount /\nroot /var/lib/docker\nrootfree {root}\nrootmount {mount}\n"
          "image sha256:aaa\n")
GIB = 2**30


@pytest.mark.parametrize(("free", "root", "mount", "status"), [
    (2 * 2**20, 2 * 2**20, "/", "PASS"),  # 2 GiB on one filesystem: 0.6 + 1.2 fit
    (1 * 2**20, 1 * 2**20, "/", "FAIL"),  # 1 GiB there: the tar and what it unpacks to do not
    (1 * 2**20, 2 * 2**20, "/var", "PASS"),  # apart: 0.6 in dataDir, 1.2 by the engine
    (1 * 2**20, 1 * 2**20, "/var", "FAIL"),  # the engine's 1 GiB is short of 1.2
    (3 * 2**19, 3 * 2**19, "/", "FAIL"),  # 1.5 GiB each way, but one filesystem: 1.8 is short
    (3 * 2**19, 3 * 2**19, "/var", "PASS"),  # the same room apart: 0.6 and 1.2 fit
])
def test_the_docker_hosts_room_on_recorded_lines(free, root, mount, status):
    host = Host(name="d", address="192.0.2.20", runtime="docker")
    want = bundle.Wanted("", "", 0, "b", images=(
        ("x:1", "sha256:aaa", 5 * GIB), ("y:1", "sha256:bbb", 6 * GIB // 10),
        ("z:1", "sha256:ccc", 6 * GIB // 10)))
    raw = {bundle.DOCKER_FILE: DOCKER.format(free=free, root=root, mount=mount)}
    docker, disk = bundle.docker_findings(host, 0, raw, ("x:1", "y:1", "z:1"), want)
    assert (docker.status, docker.found) == (
        "PASS", "engine root /var/lib/docker; 1 of 3 bundled images already there")
    assert disk.status == status, disk
    assert disk.expected.startswith(">= 0.6 GiB free in dataDir (the largest tar, copied one at "
                                    "a time) and >= 1.2 GiB where the engine keeps its images "
                                    "(2 to load)"), disk.expected


def test_a_docker_host_without_the_file_warns_and_one_without_an_engine_fails():
    host = Host(name="d", address="192.0.2.20", runtime="docker")
    want = bundle.Wanted("", "", 0, "b", images=(("x:1", "sha256:aaa", GIB),))
    [warn] = bundle.docker_findings(host, 3, {"bundle-docker.txt.err": "exit 127\nsh: df"},
                                    ("x:1",), want)
    assert (warn.status, warn.check, warn.found) == ("WARN", "bundle.host",
                                                     "bundle-docker.txt: sh: df")
    raw = {bundle.DOCKER_FILE: "free 10\nmount /\nnoengine permission denied while trying "
           "to connect to the Docker daemon socket\n"}
    [fail] = bundle.docker_findings(host, 3, raw, ("x:1",), want)
    assert (fail.status, fail.check) == ("FAIL", "bundle.docker")
    assert fail.found == ("no engine: permission denied while trying to connect to the Docker "
                          "daemon socket")
    assert fail.fix.startswith("let hosts[3].user run docker (the docker group)"), fail.fix


def test_a_remote_engine_s_room_is_not_measured_here_and_docker_s_warnings_stay_out():
    host = Host(name="d", address="192.0.2.20", runtime="docker")
    want = bundle.Wanted("", "", 0, "b", images=(("x:1", "sha256:aaa", GIB),))
    raw = {bundle.DOCKER_FILE: "free 10\nmount /\nroot /var/lib/docker\nremote\n"}
    _, disk = bundle.docker_findings(host, 0, raw, ("x:1",), want)
    assert (disk.status, disk.found) == (
        "WARN", "the engine is another machine's (DOCKER_HOST): its room is not measured here")
    cmd = bundle.docker_commands(host)[bundle.DOCKER_FILE]
    assert "docker info --format '{{.DockerRootDir}}' 2>/dev/null" in cmd  # stdout alone


def test_the_nearest_existing_folder_is_found_with_no_external_command(tmp_path):
    """dirname missing (an empty PATH): the loop still ends (it used `$(dirname "$p")`, which
    then never changed `p`)."""
    import subprocess

    from pdctl.preflight.host import nearest
    from pdctl.render.template import quote_path

    for path, found in ((f"{tmp_path}/a/b/c", str(tmp_path)), ("/nonexistent-pdctl/x", "/"),
                        ("no-such-relative", ".")):
        done = subprocess.run(["/bin/sh", "-c", nearest(quote_path(path)) + 'echo "$p"'],
                              env={"PATH": ""}, capture_output=True, text=True, timeout=10,
                              cwd=tmp_path)
        assert done.stdout.strip() == found, (path, done.stdout, done.stderr)


def test_the_findings_go_to_the_hosts_each_part_of_the_bundle_serves():
    """conda gpu-a and venv gpu-c install from the bundle, docker gpu-b loads its images: with
    gpu-c unreachable, gpu-a gets the install checks, gpu-b the engine and room checks, gpu-c
    nothing (its ssh finding says why), and bundle.index closes the list."""
    spec = Path(__file__).parents[2] / "examples" / "phase0-multihost.yaml"
    plan = make_plan(load_text(spec.read_text(), str(spec))[0])
    ref = plan.image
    want = bundle.Wanted("3.11", "manylinux_2_28_x86_64", 1, "b/",
                         images=((ref, "sha256:aaa", 1 << 30),))
    raw = {"gpu-a": {bundle.FILE: LINES.format(free=10 << 20)},
           "gpu-b": {bundle.DOCKER_FILE: "free 10485760\nmount /\nroot /var/lib/docker\n"
                                         "rootfree 10485760\nrootmount /\n"},
           "gpu-c": {SSH: "cannot connect: timed out"}}
    found = bundle.findings(plan, raw, want, render(plan))
    assert [(f.check, f.where) for f in found] == [
        ("bundle.python", "gpu-a"), ("bundle.platform", "gpu-a"), ("bundle.disk", "gpu-a"),
        ("bundle.docker", "gpu-b"), ("bundle.disk", "gpu-b"), ("bundle.index", plan.name)]
    assert found[-1].status == "FAIL"  # rendered for an index, not from the bundle


@pytest.mark.parametrize(
    ("extra", "status", "says"),
    [
        # the home on dataDir's filesystem: 3 GiB of adapters on top of 8 GiB of weights
        ("adfree 10485760\nadmount /\n", "FAIL", "3.0 GiB of LoRA adapters"),
        # on a disk of its own, with room: PASS, and both are named
        ("adfree 4194304\nadmount /home\n", "PASS", "and >= 3.0 GiB on /home for the LoRA"),
        ("adfree 1048576\nadmount /home\n", "FAIL", "free space on /home (the SSH user's home)"),
        ("", "WARN", "check df on hosts[0].dataDir and in the home folder"),
    ],
)
def test_the_lora_adapters_need_room_in_the_home_folder(extra, status, says):
    """`up --bundle` copies the adapters to ~/.cache/pdctl-adapters, not into dataDir."""
    want = bundle.Wanted("3.12", "manylinux_2_28_x86_64", 1 << 20, "b/", 8 << 30,
                         adapters=3 << 30)
    raw = {bundle.FILE: LINES.format(free=10 << 20) + extra}  # 10 GiB free on /
    got = {f.check: f for f in bundle.host_findings(HOST, 0, raw, want)}["bundle.disk"]
    assert got.status == status and says in f"{got.found} {got.expected} {got.fix}", got


def test_a_host_without_an_engine_needs_room_for_the_wheels_only():
    """The router's own host gets the wheels, not the weights or the adapters (ship_host)."""
    spec = Path(__file__).parents[2] / "examples" / "phase2-nixl-hosts.yaml"
    text = spec.read_text().replace(
        "router: {venv: /opt/vllm-router}", "router: {venv: /opt/vllm-router, host: gw}"
    ).replace("hosts:\n", "hosts:\n  - {name: gw, address: 192.0.2.20, gpus: [0]}\n", 1
              ).replace("prefill: {replicas: 1}", "prefill: {replicas: 1, hosts: [gpu-a]}"
                        ).replace("decode: {replicas: 1}", "decode: {replicas: 1, hosts: [gpu-a]}")
    plan = make_plan(load_text(text, "spec.yaml")[0])
    want = bundle.Wanted("3.12", "manylinux_2_28_x86_64", 1 << 20, "b/", 8 << 30,
                         files=(("wheels/a.whl", 1 << 20), ("weights/m.safetensors", 8 << 30)),
                         adapters=1 << 30)
    lines = LINES.format(free=4 << 20)  # 4 GiB free: room for the wheels, not the weights
    home = lines + "adfree 4194304\nadmount /\n"  # gw's has no adapters line: none go there
    found = bundle.findings(plan, {"gw": {bundle.FILE: lines}, "gpu-a": {bundle.FILE: home}},
                            want, render(plan))
    disk = {f.where: f for f in found if f.check == "bundle.disk"}
    assert disk["gw"].status == "PASS" and "weights" not in disk["gw"].expected, disk["gw"]
    assert disk["gpu-a"].status == "FAIL", disk["gpu-a"]
    assert "8.0 GiB of weights; 1.0 GiB of LoRA adapters" in disk["gpu-a"].expected
