"""`pdctl bundle --weights PATH`: a local Hugging Face snapshot folder copied into the bundle,
every file pinned by sha256 (a second run copies only what changed); `up --bundle` copies it to
each engine host (only the files whose sha256 differs there: the real sshd test host lo1) and
starts the engines from that copy under the same served name, with HF_HUB_OFFLINE=1."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from pdctl.offline import manifest as mf
from pdctl.offline.download import bundle
from pdctl.offline.ship import bundled, from_unit, point, ship, weights_dir
from pdctl.plan import make_plan
from pdctl.spec import load_text
from pdctl.targets.ssh import SshOptions
from tests.helpers import pdctl, plan_of
from tests.offline.test_bundle import EXAMPLES, WHEELS
from tests.offline.test_ship import spec_file
from tests.targets.testbed import host_entry, stand_in_spec, write_spec

SNAPSHOT = {
    "config.json": b'{"model_type": "llama", "hidden_size": 8}',
    "model.safetensors": bytes(range(256)) * 8,
    "tokenizer.json": b'{"version": "1.0"}',
    "tokenizer_config.json": b"{}",
    "original/params.json": b'{"dim": 8}',
}


def snapshot(where: Path, files: dict[str, bytes] = SNAPSHOT) -> Path:
    for rel, data in files.items():
        (where / rel).parent.mkdir(parents=True, exist_ok=True)
        (where / rel).write_bytes(data)
    (where / ".cache").mkdir(exist_ok=True)  # huggingface-cli's own: left out
    (where / ".cache" / "x.lock").write_bytes(b"")
    return where


def weights_of(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in folder.rglob("*") if p.is_file()}


def test_the_snapshot_goes_into_the_bundle_pinned_and_a_second_run_copies_what_changed(tmp_path):
    source = snapshot(tmp_path / "snap")
    out, said = tmp_path / "bundle", []
    plan = plan_of(EXAMPLES / "phase0-conda.yaml")
    made = bundle(plan, (), "", "", out, said.append, source)
    assert made.weights == str(source) and made.needs == ()
    assert {e.path: e.size for e in made.files} == {
        f"weights/{k}": len(v) for k, v in SNAPSHOT.items()}
    data = json.loads((out / mf.MANIFEST).read_text())
    assert data["weights"] == str(source) and all(len(f["sha256"]) == 64 for f in data["files"])
    assert mf.verify(out) == made and weights_of(out / mf.WEIGHTS) == SNAPSHOT
    assert said[-1] == f"weights from {source}: 5 files copied, 0 already there"
    inode = (out / "weights/model.safetensors").stat().st_ino
    (source / "tokenizer.json").write_bytes(b'{"version": "2.0"}')
    (source / "original/params.json").unlink()
    again = bundle(plan, (), "", "", out, said.append, source)
    assert said[-1] == f"weights from {source}: 1 files copied, 3 already there"
    assert (out / "weights/model.safetensors").stat().st_ino == inode
    assert mf.verify(out) == again and "weights/original/params.json" not in {
        e.path for e in again.files}
    (out / "weights/model.safetensors").write_bytes(b"damaged")
    bundle(plan, (), "", "", out, said.append, source)  # a damaged copy is copied again
    assert (out / "weights/model.safetensors").read_bytes() == SNAPSHOT["model.safetensors"]


def test_a_folder_that_is_no_model_is_refused_before_anything_is_written(tmp_path):
    (tmp_path / "snap").mkdir()
    out = tmp_path / "b"
    result = pdctl("bundle", "examples/phase2-nixl-hosts.yaml", "-o", str(out), "--python",
                   "3.11", "--platform", "manylinux_2_28_x86_64", "--weights",
                   str(tmp_path / "snap"))
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: --weights {tmp_path}/snap: no config.json: not a Hugging Face model folder; "
        "give the snapshot folder, e.g. ~/.cache/huggingface/hub/models--ORG--NAME/snapshots/"
        "REVISION"]
    assert not out.exists()


def test_an_engine_without_a_served_name_keeps_the_models_name():
    cmd = ("python3", "guard.py", "--", "vllm", "serve", "org/m", "--port", "1")
    assert point(cmd, "org/m", "org/m", "W") == (
        "python3", "guard.py", "--", "vllm", "serve", "W", "--served-model-name", "org/m",
        "--port", "1")


def test_a_manifest_path_out_of_the_bundle_is_refused(tmp_path):
    bundle(plan_of(EXAMPLES / "phase0-conda.yaml"), (), "", "", tmp_path, lambda _: None,
           snapshot(tmp_path / "snap"))
    text = (tmp_path / mf.MANIFEST).read_text()
    (tmp_path / mf.MANIFEST).write_text(text.replace("weights/original/", "weights/../../"))
    try:
        mf.read(tmp_path)
    except mf.BundleError as err:
        assert "is not wheels/NAME, images/NAME, weights/PATH or adapters/PATH" in str(err)
    else:
        raise AssertionError("a path out of the bundle was read")


def test_the_weights_go_to_the_host_once_and_the_engine_starts_from_them(ssh_env, tmp_path):
    spec, _ = load_text(spec_file(ssh_env, tmp_path).read_text(), "spec.yaml")
    plan = make_plan(spec)
    folder = tmp_path / "bundle"
    (folder / mf.WHEELS).mkdir(parents=True)
    for name, data in WHEELS.items():
        (folder / mf.WHEELS / name).write_bytes(data)
    snapshot(folder / mf.WEIGHTS)
    mf.write(folder, mf.Manifest("0", "spec", "3.11", "manylinux_2_28_x86_64",
                                 (("engines (venv)", (plan.release.pip,)),),
                                 mf.entries(folder), weights="/src/snap"))
    ready, rendered, made = bundled(plan, folder)
    [start] = [a.text for a in rendered.artifacts if a.path.endswith("/start.sh")]
    [line] = [ln for ln in start.splitlines() if ln.startswith("setsid vllm serve ")]
    assert line.startswith(f"setsid vllm serve {from_unit(plan.name)} --host "), line
    assert f" --served-model-name {shlex.quote(plan.served_name)} " in line, line
    assert "export HF_HUB_OFFLINE=1" in start and 'cd "$unit_dir"' in start
    options = SshOptions(known_hosts=ssh_env.known_hosts)
    there = Path(weights_dir(ready, ready.units[0].host))  # lo1 shares this filesystem
    assert there == Path(weights_dir(plan, plan.units[0].host))
    # the engine's folder is <dataDir>/<name>/<unit>: from_unit from there is the copy, beside
    # the deployment folder (which `down` removes) and not in it
    unit = ready.units[0]
    engine_dir = Path(unit.host.data_dir) / plan.name / unit.name
    assert os.path.normpath(engine_dir / from_unit(plan.name)) == str(there)
    assert not there.is_relative_to(engine_dir.parent)
    first = ship(ready, folder, made, options)
    assert [(s.sent, s.weights_sent, s.kept) for s in first] == [(7, 5, 0)]
    assert weights_of(there) == SNAPSHOT
    assert [(s.sent, s.kept) for s in ship(ready, folder, made, options)] == [(0, 7)]
    (there / "original/params.json").write_bytes(b"{}")
    (there / "stale.bin").write_bytes(b"old")
    again = ship(ready, folder, made, options)
    assert [(s.sent, s.weights_sent, s.sent_bytes) for s in again] == [(1, 1, 10)]
    assert weights_of(there) == SNAPSHOT


def test_a_spec_that_installs_nothing_bundles_its_weights_alone(ssh_env, tmp_path):
    """A CPU engine on a venv host installs nothing with pip: `--weights` makes a bundle of the
    model alone, no --python or --platform asked; `up --bundle --dry-run` takes it."""
    entry = host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, venv=str(tmp_path / "venv"))
    spec = write_spec(tmp_path / "spec.yaml",
                      stand_in_spec("offw", [entry], {"replicas": 1, "port": 18998}))
    out = tmp_path / "b"
    nothing = pdctl("bundle", str(spec), "-o", str(out))
    assert nothing.returncode == 2 and "installs nothing with pip" in nothing.stderr
    made = pdctl("bundle", str(spec), "-o", str(out), "--weights",
                 str(snapshot(tmp_path / "snap")))
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(f"{out}: 5 files, 0.0 MB (no wheels; weights: 5 files)")
    dry = pdctl("up", str(spec), "--bundle", str(out), "--dry-run", "--offline")
    assert dry.returncode == 0, dry.stdout + dry.stderr


def test_split_cuts_big_files_into_parts_that_up_joins_and_checks(tmp_path):
    """`--split 1000`: model.safetensors (2048 bytes) kept as three parts, pinned by the whole
    file's sha256; a second run keeps them; verify (as `up --bundle` does) joins and checks
    them, and names a missing part."""
    out = tmp_path / "b"
    args = ("bundle", "examples/cpu-quickstart.yaml", "-o", str(out), "--weights",
            str(snapshot(tmp_path / "snap")), "--split", "1000")
    made = pdctl(*args)
    assert "; 1 files split into 3 parts)" in made.stdout, made.stdout + made.stderr
    big = out / "weights" / "model.safetensors"
    assert not big.exists() and [Path(f"{big}.{i:03d}").stat().st_size for i in range(3)] == [
        1000, 1000, 48]
    again = pdctl(*args)
    assert "0 files copied, 5 already there" in again.stderr, again.stderr
    assert mf.verify(out).files == mf.read(out).files and big.read_bytes() == SNAPSHOT[
        "model.safetensors"] and not Path(f"{big}.000").exists()
    pdctl(*args)
    Path(f"{big}.001").unlink()
    try:
        mf.verify(out)
    except mf.BundleError as err:
        assert str(err).startswith(f"{big}.001: missing; the bundle is incomplete"), err
    else:
        raise AssertionError("a bundle without a part was taken")
    refused = pdctl(*args[:-1], "lots")
    assert refused.returncode == 2 and refused.stderr.startswith(
        "error: --split: expected a size like 4G, 700M or 2Gi (got 'lots')"), refused.stderr
