"""`pdctl down --dry-run` (lists, touches nothing) on a real sshd host and on the kmock
cluster; `down` on Kubernetes asks first and refuses without a terminal; `status` counts
every unit, the router's too (issue 17)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.helpers import checked, known
from tests.pty_run import on_a_pty
from tests.targets.kube.examples import kube_target
from tests.targets.kube.test_target import phase1, write_kube_files
from tests.targets.testbed import (
    SshEnv,
    free_port,
    host_entry,
    listening,
    lo1_spec,
    pdctl,
    processes_in,
    write_spec,
)

ROOT = Path(__file__).resolve().parents[3]


def test_down_dry_run_on_a_host_lists_and_stops_nothing(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
) -> None:
    spec = lo1_spec(ssh_env, tmp_path, "dry", fake_venv)
    folder = tmp_path / "lo1" / "dry"
    before = checked(pdctl("down", str(spec), "--dry-run", *known(ssh_env)))
    assert "nothing runs: nothing to stop" in before.stdout
    checked(pdctl("up", str(spec), "--yes", "--timeout", "60", *known(ssh_env)))
    try:
        running = processes_in(folder)
        assert running
        listing = sorted(p.name for p in folder.rglob("*"))
        dry = checked(pdctl("down", str(spec), "--dry-run", *known(ssh_env)))
        assert "would stop dry-serve-0 (lo1)" in dry.stdout
        assert f"would remove the folder {folder} on lo1" in dry.stdout
        # Nothing was touched: the same processes run, the same files are there.
        assert processes_in(folder) == running
        assert sorted(p.name for p in folder.rglob("*")) == listing
        status = pdctl("status", str(spec), "-o", "json", *known(ssh_env))
        assert json.loads(status.stdout)["summary"] == {
            "units": 1, "up": 1, "roles": {"serve": 1}, "upByRole": {"serve": 1}, "degraded": [],
        }
    finally:
        down = pdctl("down", str(spec), *known(ssh_env))
    assert down.returncode == 0, down.stderr  # on hosts, down does not ask
    assert "stopped dry-serve-0 on lo1" in down.stdout
    assert not folder.exists()


def test_status_counts_the_router(ssh_env: SshEnv, tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "examples" / "phase2-p2p-nccl.yaml").read_text())
    data["hosts"] = [host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, gpus=[0, 1, 2, 3])]
    spec = write_spec(tmp_path / "spec.yaml", data)
    table = checked(pdctl("status", str(spec), *known(ssh_env)))
    assert "0 of 4 units up (prefill 0/1, decode 0/2, router 0/1)" in table.stdout, table.stdout
    doc = json.loads(pdctl("status", str(spec), "-o", "json", *known(ssh_env)).stdout)
    assert doc["summary"]["units"] == 4 and doc["summary"]["roles"]["router"] == 1


def test_down_on_kubernetes_dry_run_then_asks(cluster, tmp_path: Path) -> None:
    plan, objs = phase1("kdry")
    tgt = kube_target(cluster.url, plan)
    tgt.apply_objects(objs)
    owned = sorted(tgt.owned())
    spec, kubeconfig = write_kube_files(cluster.url, tmp_path, "kdry")
    kube = ["--kubeconfig", str(kubeconfig)]
    dry = checked(pdctl("down", str(spec), "--dry-run", *kube))
    assert "would delete Deployment/kdry-serve (vllm-inference)" in dry.stdout
    assert "would delete Service/kdry (vllm-inference)" in dry.stdout
    assert "would keep PersistentVolumeClaim/kdry-model-cache" in dry.stdout
    with_volumes = pdctl("down", str(spec), "--dry-run", "--delete-volumes", *kube)
    assert "would delete PersistentVolumeClaim/kdry-model-cache" in with_volumes.stdout
    assert sorted(tgt.owned()) == owned  # a dry run deletes nothing
    # No terminal to confirm on and no --yes: refused, one line, exit 2, nothing deleted.
    refused = checked(pdctl("down", str(spec), *kube), 2)
    assert len(refused.stderr.splitlines()) == 1 and "add --yes" in refused.stderr
    assert refused.stdout == ""
    assert sorted(tgt.owned()) == owned
    # On a terminal it asks: "n" keeps everything, "y" deletes.
    code, shown = on_a_pty(["down", str(spec), *kube], reply="n")
    assert code == 130 and "delete the Kubernetes objects of 'kdry'" in shown, shown
    assert sorted(tgt.owned()) == owned
    code, shown = on_a_pty(["down", str(spec), "--delete-volumes", *kube], reply="y")
    assert code == 0 and "deleted 3 objects" in shown, shown
    assert tgt.owned() == []


# `down` reports what each unit's stop.sh did: a unit whose stop.sh fails is NOT stopped
# (exit 1) and keeps its folder, with the deployment folder, so that a later `down` can retry;
# a unit that was not running says so instead of `stopped`.
#
# A stop.sh that fails stands for what the review found (runtime docker, no daemon: stop.sh
# exits 1 `cannot reach the docker daemon`): the test replaces one unit's stop.sh on lo1 (this
# machine) with one that fails the same way, and puts the real one back for the retry.
NAME = "downt"
FAILING = """#!/bin/bash
echo 'stopping the container'
echo 'cannot reach the docker daemon' >&2
exit 1
"""


def deploy(env: SshEnv, venv: Path, data: Path) -> tuple[Path, int]:
    port = free_port()
    spec = lo1_spec(env, data, NAME, venv, port, host={"instances": 2}, replicas=2)
    checked(pdctl("up", str(spec), "--yes", "--known-hosts", env.known_hosts, "--timeout", "60"))
    return spec, port


def test_a_failing_stop_script_is_not_stopped_and_its_folder_stays(ssh_env, fake_venv, tmp_path):
    spec, port = deploy(ssh_env, fake_venv, tmp_path)
    known = ["--known-hosts", ssh_env.known_hosts]
    folder = tmp_path / "lo1" / NAME
    broken = folder / f"{NAME}-serve-1" / "stop.sh"
    real = broken.read_text()
    broken.write_text(FAILING)
    try:
        down = pdctl("down", str(spec), *known)
        out = down.stdout + down.stderr
        assert down.returncode == 1, out
        assert f"NOT stopped: {NAME}-serve-1 on lo1 (cannot reach the docker daemon)" in out
        assert f"stopped {NAME}-serve-0 on lo1" in out
        assert f"stopped {NAME}-serve-1" not in out
        assert listening(port + 1) and not listening(port)
        # the failed unit's folder (with the deployment folder) stays for the retry
        assert broken.exists()
        assert not (folder / f"{NAME}-serve-0").exists()
    finally:
        broken.write_text(real)
    retry = checked(pdctl("down", str(spec), *known))
    assert f"stopped {NAME}-serve-1 on lo1" in retry.stdout
    assert not listening(port + 1)
    assert not folder.exists()


def test_down_says_was_not_running_for_a_stopped_unit(ssh_env, fake_venv, tmp_path):
    spec, port = deploy(ssh_env, fake_venv, tmp_path)
    unit = tmp_path / "lo1" / NAME / f"{NAME}-serve-0"
    stop = subprocess.run(["bash", str(unit / "stop.sh")], capture_output=True, text=True)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert not listening(port)
    down = pdctl("down", str(spec), "--known-hosts", ssh_env.known_hosts)
    out = down.stdout + down.stderr
    assert down.returncode == 0, out
    assert f"{NAME}-serve-0 on lo1 was not running" in out
    assert f"stopped {NAME}-serve-0" not in out
    assert f"stopped {NAME}-serve-1 on lo1" in out
    assert not (tmp_path / "lo1" / NAME).exists()
    again = checked(pdctl("down", str(spec), "--known-hosts", ssh_env.known_hosts))
    assert f"no deployment folder of '{NAME}' on lo1" in again.stdout + again.stderr
