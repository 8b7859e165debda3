"""Gathering over SSH from the real sshd test hosts (tests/services.sh). The hosts share this
machine's filesystem, so each finds its recorded GPU outputs through a fake `nvidia-smi` that
picks a folder by the server address in $SSH_CONNECTION; everything else (df, ss, hostname,
/sys, /proc) is the host's real answer."""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from tests.helpers import written
from tests.preflight.conftest import FIX, json_findings, pdctl
from tests.preflight.sshd_hosts import sshd_hosts
from tests.targets.testbed import free_port

FAKE_SMI = (Path(__file__).parent / "data" / "fake-nvidia-smi.sh").read_text()


def _exe(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


@pytest.fixture
def testbed(tmp_path: Path):
    hosts = sshd_hosts()
    root = tmp_path / "by-address"
    fakebin = tmp_path / "bin"
    fakebin.mkdir()
    _exe(fakebin / "nvidia-smi", FAKE_SMI.format(root=root))
    _exe(fakebin / "conda", "#!/bin/sh\necho 'conda 24.7.1'\n")
    shutil.copytree(FIX / "h200x2", root / hosts["lo1"][0])
    if "node1" in hosts:
        shutil.copytree(FIX / "pcie4", root / hosts["node1"][0])
    return hosts, fakebin, tmp_path


def _spec(tmp: Path, hosts: dict[str, tuple[str, int]], names: list[str], serve: str) -> Path:
    key = os.environ["PDCTL_TEST_SSH_KEY"]
    gpus = {"lo1": "[0, 1]", "lo2": "[0, 1]", "node1": "[0, 1, 2, 3]", "node2": "[0, 1]"}
    lines = [
        f"  - {{name: {n}, address: '{hosts[n][0]}', port: {hosts[n][1]}, user: root, "
        f"identityFile: '{key}', gpus: {gpus[n]}, runtime: conda, "
        f"hfCache: '{tmp}/hf-{n}'}}"
        for n in names
    ]
    spec = tmp / "spec.yaml"
    spec.write_text(
        "name: ssh-test\nphase: 0\nmodel: {name: meta-llama/Llama-3.1-8B-Instruct, "
        "maxModelLen: 8192}\nhosts:\n" + "\n".join(lines) + f"\nserve: {serve}\n"
    )
    return spec


def _by(findings: list[dict[str, str]], check: str, where: str) -> list[dict[str, str]]:
    return [f for f in findings if f["check"] == check and f["where"].split("/")[0] == where]


def test_gather_over_ssh_record_and_replay(testbed) -> None:
    hosts, fakebin, tmp = testbed
    names = [n for n in ("lo1", "node1", "node2") if n in hosts]
    replicas = {1: 1, 2: 3, 3: 4}[len(names)]
    # port 2222 is where the loopback sshd listens: lo1 must report it taken
    spec = _spec(tmp, hosts, names, f"{{replicas: {replicas}, tensorParallel: 2, port: 2222}}")
    rec = tmp / "rec"
    proc = pdctl(
        "preflight", str(spec), "-o", "json", "--record", str(rec), "--known-hosts",
        os.environ["PDCTL_TEST_KNOWN_HOSTS"], "--remote-path", str(fakebin),
    )
    assert proc.returncode == 1, proc.stderr  # lo1's port and node2's driver fail
    found = json_findings(proc)
    assert _by(found, "gpu.count", "lo1")[0]["status"] == "PASS"
    assert _by(found, "tp.nvlink", "lo1")[0]["found"].startswith("GPUs 0,1: NV18")
    assert _by(found, "host.runtime", "lo1")[0]["found"] == "conda 24.7.1"
    assert _by(found, "host.ports", "lo1")[0]["status"] == "FAIL"
    assert _by(found, "host.shm", "lo1")[0]["status"] in ("PASS", "WARN")
    assert (rec / "lo1" / "query-gpu.csv").read_text() == (
        FIX / "h200x2" / "query-gpu.csv"
    ).read_text()
    if "node1" in hosts:
        assert (rec / "node1" / "hostname.txt").read_text().strip() == "node1"
        tp = _by(found, "tp.nvlink", "node1")
        assert tp[0]["status"] == "WARN" and "use GPUs 0,2" in tp[0]["fix"]
        assert _by(found, "host.ports", "node1")[0]["status"] == "PASS"
    if "node2" in hosts:
        drv = _by(found, "gpu.driver", "node2")[0]
        assert drv["status"] == "FAIL" and "driver not loaded" in drv["found"]
    again = pdctl("preflight", str(spec), "-o", "json", "--replay", str(rec))
    assert json_findings(again) == found


def test_unknown_host_key_is_refused_unless_accepted(testbed) -> None:
    hosts, fakebin, tmp = testbed
    name = "lo2" if "lo2" in hosts else "lo1"
    spec = _spec(tmp, hosts, [name], "{replicas: 1, tensorParallel: 2, port: 18000}")
    known = written(tmp / "known_hosts", "")
    proc = pdctl(
        "preflight", str(spec), "-o", "json", "--known-hosts", str(known), "--remote-path",
        str(fakebin),
    )
    assert proc.returncode == 1
    (reach,) = [f for f in json_findings(proc) if f["check"] == "host.reach"]
    assert "unknown host key" in reach["found"]
    assert known.read_text() == ""
    proc = pdctl(
        "preflight", str(spec), "-o", "json", "--known-hosts", str(known), "--accept-new-host-keys",
        "--remote-path", str(fakebin),
    )
    assert not [f for f in json_findings(proc) if f["check"] == "host.reach"]
    addr, port = hosts[name]
    assert known.read_text().startswith(f"[{addr}]:{port} ssh-ed25519 ")
    assert json.loads(proc.stdout)["counts"]["PASS"] > 0


# preflight checks the router's Prometheus port like every other port (issue 36): with
# `router.metricsPort` taken on the router's host, vllm-router panics in its Prometheus listener
# some 30 s into `up`; preflight must fail first and name the field. Over SSH to lo1, with a
# real listening socket holding the port.
def test_a_taken_router_metrics_port_fails_preflight_naming_the_field(
    testbed: tuple, tmp_path: Path
) -> None:
    hosts, fakebin, tmp = testbed
    if hosts.get("lo1", ("",))[0] != "127.0.0.1":
        pytest.skip("needs the loopback test host lo1 on 127.0.0.1")
    addr, port = hosts["lo1"]
    key = os.environ["PDCTL_TEST_SSH_KEY"]
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()
    taken = held.getsockname()[1]
    spec = tmp / "spec.yaml"
    spec.write_text(
        "name: rport\nphase: 2\nmodel: {name: meta-llama/Llama-3.1-8B-Instruct, "
        "maxModelLen: 8192}\nengine: {version: '0.33.0'}\nhosts:\n"
        f"  - {{name: lo1, address: '{addr}', port: {port}, user: root, identityFile: '{key}', "
        f"gpus: [0, 1], runtime: conda, hfCache: '{tmp}/hf'}}\n"
        f"prefill: {{replicas: 1, port: {free_port()}}}\n"
        f"decode: {{replicas: 1, port: {free_port()}}}\n"
        "disaggregation: {connector: nixl}\n"
        f"router: {{port: {free_port()}, metricsPort: {taken}}}\n"
    )
    try:
        proc = pdctl("preflight", str(spec), "-o", "json", "--no-transfer", "--known-hosts",
                     os.environ["PDCTL_TEST_KNOWN_HOSTS"], "--remote-path", str(fakebin))
    finally:
        held.close()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (found,) = _by(json_findings(proc), "host.ports", "lo1")
    assert found["status"] == "FAIL"
    assert f"in use: {taken} (router.metricsPort)" in found["found"], found
    assert "(router.metricsPort)" in found["fix"]
