"""A deployment started with `up --bundle DIR` on a real sshd test host (lo1) with the stand-in
engine: `status`, `diff` and `restart` hold the host against the scripts rendered to install from
the bundle when given `--bundle DIR` (read from its manifest, no file hashed); without it they
see the scripts `up` would render for a package index, so `status` says outdated, `diff` shows
the install line and `restart` is refused with the way out named."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from pdctl.offline import manifest as mf
from pdctl.offline.ship import bundled, installed_from
from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.render.host import bundle_dir, wheels_dir
from pdctl.spec import load_text
from tests.helpers import known
from tests.offline.test_bundle import WHEELS, make_bundle
from tests.targets.testbed import checked, host_entry, pdctl, stand_in_spec, status_rows
from tests.targets.testbed import write_spec as write


def spec_of(ssh_env, data: Path, venv: Path) -> Path:
    entry = host_entry(ssh_env, ssh_env.host("lo1"), data, venv=str(venv), gpus=[0])
    return write(data / "spec.yaml", stand_in_spec("offdep", [entry], {"replicas": 1,
                                                                       "port": 18994},
                                                   engine={"device": "cuda"}))


def bundle_for(spec: Path, folder: Path) -> mf.Manifest:
    plan = make_plan(load_text(spec.read_text(), str(spec))[0])
    return make_bundle(folder, WHEELS, (plan.release.pip,))


def test_installed_from_renders_what_up_bundle_renders_without_hashing(ssh_env, fake_venv,
                                                                       tmp_path):
    spec = spec_of(ssh_env, tmp_path, fake_venv)
    folder = tmp_path / "bundle"
    bundle_for(spec, folder)
    plan = make_plan(load_text(spec.read_text(), str(spec))[0])
    _, checked_render, _ = bundled(plan, folder)
    (folder / mf.WHEELS / "a-1.0-py3-none-any.whl").write_bytes(b"x" * 100)  # damaged now
    ready = installed_from(plan, folder)  # the manifest alone: still the same
    read_render = render(ready)
    assert ready.bundled
    assert [(a.path, a.text) for a in read_render.artifacts] == [
        (a.path, a.text) for a in checked_render.artifacts]
    start = next(a.text for a in read_render.artifacts if a.path.endswith("/start.sh"))
    assert "--no-index --find-links" in start, start


def test_status_diff_and_restart_take_the_bundle_up_was_given(ssh_env, fake_venv, tmp_path):
    spec = spec_of(ssh_env, tmp_path, fake_venv)
    folder = tmp_path / "bundle"
    bundle_for(spec, folder)
    flags = known(ssh_env)
    try:
        checked(pdctl("up", str(spec), "--bundle", str(folder), "--yes", "--timeout", "60",
                      *flags))
        bare = status_rows(spec, *flags, code=0)  # the scripts rendered for a package index
        assert [r["state"] for r in bare.values()] == ["running (outdated)"], bare
        table = checked(pdctl("status", str(spec), *flags))
        assert table.stdout.rstrip().endswith(
            "one started with `up --bundle DIR` takes --bundle DIR here too"), table.stdout
        rows = status_rows(spec, "--bundle", str(folder), *flags, code=0)
        again = checked(pdctl("status", str(spec), "--bundle", str(folder), *flags))
        assert "outdated" not in again.stdout, again.stdout
        assert [(r["state"], r["health"]) for r in rows.values()] == [("running", "healthy")]
        [unit] = rows
        same = pdctl("diff", str(spec), "--bundle", str(folder), *flags)
        assert (same.returncode, same.stdout.splitlines()[-1]) == (0, "no changes"), same.stderr
        other = pdctl("diff", str(spec), *flags)
        assert other.returncode == 1, other.stdout + other.stderr
        assert "-  \"$venv/bin/python\" -m pip install --no-index --find-links" in other.stdout
        refused = pdctl("restart", str(spec), unit, "--yes", *flags)
        assert refused.returncode != 0
        assert refused.stderr.strip().endswith(
            "one started with `up --bundle DIR` takes --bundle DIR here too"), refused.stderr
        assert status_rows(spec, "--bundle", str(folder), *flags)[unit]["pid"] == rows[unit]["pid"]
        done = checked(pdctl("restart", str(spec), unit, "--bundle", str(folder), "--yes",
                             "--timeout", "60", *flags))
        assert f"restarted {unit}: healthy." in done.stdout, done.stdout
        after = status_rows(spec, "--bundle", str(folder), *flags, code=0)
        assert after[unit]["state"] == "running" and after[unit]["pid"] != rows[unit]["pid"]
    finally:
        checked(pdctl("down", str(spec), *flags))  # down stops what runs: no bundle needed


def test_a_missing_bundle_folder_is_one_line_before_anything_connects(tmp_path):
    spec = write(tmp_path / "spec.yaml", stand_in_spec(
        "offdep", [{"name": "gpu1", "address": "192.0.2.10", "venv": "/opt/v", "gpus": [0]}],
        {"replicas": 1, "port": 18994}, engine={"device": "cuda"}))
    for verb in ("status", "diff", "restart"):
        args = (verb, str(spec), *(("offdep-serve-0", "--yes") if verb == "restart" else ()))
        out = pdctl(*args, "--bundle", str(tmp_path / "nowhere"))
        assert out.returncode == 2, (verb, out.stdout, out.stderr)
        assert out.stderr.strip().splitlines() == [
            f"error: {tmp_path}/nowhere: no such bundle folder; run `pdctl bundle SPEC -o DIR`"]



def test_scale_starts_new_instances_from_the_bundle_and_copies_it_where_missing(
        ssh_env, fake_venv, tmp_path):
    entry = host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, venv=str(fake_venv),
                       gpus=[0, 1])
    spec = write(tmp_path / "spec.yaml", stand_in_spec(
        "offsc", [entry], {"replicas": 1, "port": 18992}, engine={"device": "cuda"}))
    folder = tmp_path / "bundle"
    bundle_for(spec, folder)
    flags = known(ssh_env)
    plan = make_plan(load_text(spec.read_text(), str(spec))[0])
    there = Path(wheels_dir(plan, plan.units[0].host))  # lo1 shares this filesystem
    try:
        checked(pdctl("up", str(spec), "--bundle", str(folder), "--yes", "--timeout", "60",
                      *flags))
        shutil.rmtree(there)  # as on a host that never had the bundle
        dry = checked(pdctl("scale", str(spec), "serve=2", "--bundle", str(folder), "--dry-run",
                            *flags))
        assert "would start offsc-serve-1" in dry.stdout and not there.exists(), dry.stdout
        done = checked(pdctl("scale", str(spec), "serve=2", "--bundle", str(folder),
                             "--timeout", "60", *flags))
        assert "lo1: 2 wheels and 0 weights files copied (0.0 MB), 0 already there" in \
            done.stdout, done.stdout
        assert "started offsc-serve-1" in done.stdout, done.stdout
        assert sorted(p.name for p in there.iterdir()) == sorted(WHEELS)
        rows = status_rows(spec, "--bundle", str(folder), *flags)
        assert rows["offsc-serve-0"]["state"] == "running", rows
        # the new unit runs the bundle's scripts; scaled past the spec, it is not in it
        assert rows["offsc-serve-1"]["state"] == "running (not in spec)", rows
        start = (tmp_path / "lo1" / "offsc" / "offsc-serve-1" / "start.sh").read_text()
        assert "--no-index --find-links" in start, start
    finally:
        checked(pdctl("down", str(spec), *flags))


def test_down_keeps_the_bundles_files_so_the_next_up_copies_nothing(ssh_env, fake_venv,
                                                                    tmp_path):
    """The files `up --bundle` copied live beside the deployment folder: `down` keeps them and
    says where and how much (as Kubernetes keeps the model's volume), the next `up --bundle`
    finds them there; `down --delete-bundle` removes them."""
    spec = spec_of(ssh_env, tmp_path, fake_venv)
    folder = tmp_path / "bundle"
    bundle_for(spec, folder)
    flags = known(ssh_env)
    plan = make_plan(load_text(spec.read_text(), str(spec))[0])
    host = plan.units[0].host
    there = Path(bundle_dir(plan.name, host))  # lo1 shares this filesystem
    up = ("up", str(spec), "--bundle", str(folder), "--yes", "--timeout", "60", *flags)
    try:
        first = checked(pdctl(*up))
        assert "lo1: 2 wheels and 0 weights files copied (0.0 MB), 0 already there" in \
            first.stdout, first.stdout
        dry = checked(pdctl("down", str(spec), "--dry-run", *flags))
        assert f"would keep {there} on lo1 (0.0 MB, the files `up --bundle` copied); " \
            "--delete-bundle removes it" in dry.stdout, dry.stdout
        down = checked(pdctl("down", str(spec), *flags))
        assert f"kept the files `up --bundle` copied, {there} on lo1 (0.0 MB); " \
            "--delete-bundle removes them" in down.stdout, down.stdout
        assert not (tmp_path / "lo1" / plan.name).exists()
        assert sorted(p.name for p in Path(wheels_dir(plan, host)).iterdir()) == sorted(WHEELS)
        checks = pdctl("preflight", str(spec), "--bundle", str(folder), "-o", "json",
                       "--no-transfer", *flags)
        [disk] = [f for f in json.loads(checks.stdout)["findings"] if f["check"] == "bundle.disk"]
        assert disk["expected"].endswith(" already there)"), disk  # both wheels, kept
        again = checked(pdctl(*up))
        assert "lo1: 0 wheels and 0 weights files copied (0.0 MB), 2 already there" in \
            again.stdout, again.stdout
        assert status_rows(spec, "--bundle", str(folder), *flags)[f"{plan.name}-serve-0"][
            "state"] == "running"
        dry = checked(pdctl("down", str(spec), "--delete-bundle", "--dry-run", *flags))
        assert f"would remove the folder {there} on lo1 (0.0 MB, the files `up --bundle` " \
            "copied)" in dry.stdout, dry.stdout
        refused = pdctl("down", str(spec), "--delete-volumes", *flags)
        assert (refused.returncode, refused.stderr.strip()) == (2, (
            "error: --delete-volumes: SSH hosts have no volumes; --delete-bundle removes the "
            "files `up --bundle` copied there")), refused.stderr
        gone = checked(pdctl("down", str(spec), "--delete-bundle", *flags))
        assert f"removed the bundle's files {there} on lo1" in gone.stdout, gone.stdout
        assert not there.exists() and not there.parent.exists()  # .pdctl-bundles too, emptied
        quiet = checked(pdctl("down", str(spec), *flags))
        assert "bundle" not in quiet.stdout, quiet.stdout
    finally:
        checked(pdctl("down", str(spec), "--delete-bundle", *flags))


def test_each_target_takes_only_its_own_delete_switch(tmp_path):
    """--delete-bundle is for SSH hosts, --delete-volumes for Kubernetes: the other is one
    line, exit 2, before anything connects (a kubeconfig that does not exist shows that)."""
    examples = Path(__file__).parents[2] / "examples"
    out = pdctl("down", str(examples / "phase1-k8s.yaml"), "--delete-bundle", "--yes",
                "--kubeconfig", str(tmp_path / "none"))
    assert (out.returncode, out.stderr.strip()) == (2, (
        "error: --delete-bundle: only SSH hosts keep the files `up --bundle` copied; leave it "
        "out; --delete-volumes deletes the model cache")), out.stderr
    out = pdctl("down", str(examples / "phase0-multihost.yaml"), "--delete-volumes",
                "--dry-run")
    assert out.returncode == 2 and "SSH hosts have no volumes" in out.stderr, out.stderr
