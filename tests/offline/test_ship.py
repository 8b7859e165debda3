"""`up --bundle`'s copy to a real sshd test host (lo1, tests/services.sh): every wheel the
first time, nothing the second, a file damaged on the host sent again, a file the manifest does
not list removed; and `up --bundle` refuses a damaged bundle before it connects."""

from __future__ import annotations

from pathlib import Path

import yaml

from pdctl.offline import manifest as mf
from pdctl.offline.ship import ship
from pdctl.plan import make_plan
from pdctl.render.host import wheels_dir
from pdctl.spec import load_text
from pdctl.targets.ssh import SshOptions
from tests.helpers import known, pdctl
from tests.offline.test_bundle import WHEELS, make_bundle
from tests.targets.testbed import host_entry, stand_in_spec


def spec_file(ssh_env, data: Path) -> Path:
    entry = host_entry(ssh_env, ssh_env.host("lo1"), data, venv=str(data / "venv"), gpus=[0])
    spec = stand_in_spec("offl", [entry], {"replicas": 1, "port": 18999},
                         engine={"device": "cuda"})
    path = data / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_the_wheels_go_to_the_host_once_and_stay_exactly_the_manifest(ssh_env, tmp_path):
    spec, _ = load_text(spec_file(ssh_env, tmp_path).read_text(), "spec.yaml")
    plan = make_plan(spec)
    folder = tmp_path / "bundle"
    made = make_bundle(folder, WHEELS, (plan.release.pip,))
    options = SshOptions(known_hosts=ssh_env.known_hosts)
    there = Path(wheels_dir(plan, plan.units[0].host))  # lo1 shares this filesystem
    first = ship(plan, folder, made, options)
    assert [(s.host, s.sent, s.sent_bytes, s.kept) for s in first] == [("lo1", 2, 150, 0)]
    assert {p.name: p.read_bytes() for p in there.iterdir()} == WHEELS
    assert [s.sent for s in ship(plan, folder, made, options)] == [0]
    (there / "a-1.0-py3-none-any.whl").write_bytes(b"x" * 100)
    (there / "old-0.1-py3-none-any.whl").write_bytes(b"old")
    again = ship(plan, folder, made, options)
    assert [(s.sent, s.kept) for s in again] == [(1, 1)]
    assert {p.name: p.read_bytes() for p in there.iterdir()} == WHEELS


def test_up_refuses_a_damaged_bundle_before_it_connects(ssh_env, tmp_path):
    spec = spec_file(ssh_env, tmp_path)
    folder = tmp_path / "bundle"
    make_bundle(folder, WHEELS, ("vllm==0.33.0",))
    (folder / mf.WHEELS / "b-2.0-py3-none-any.whl").write_bytes(b"B" * 50)
    result = pdctl("up", str(spec), "--bundle", str(folder), "--yes", *known(ssh_env))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: {folder}/wheels/b-2.0-py3-none-any.whl: sha256 differs from the manifest; "
        "the bundle is corrupted or incomplete; run `pdctl bundle SPEC -o DIR` again"]
    assert not (tmp_path / "lo1").exists()  # the host's data folder: never made
