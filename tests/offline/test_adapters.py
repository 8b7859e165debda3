"""`pdctl bundle --adapters`: the spec's Hub LoRA adapters, pinned by revision (a commit, its
start, or a branch the cache recorded), copied from a local Hugging Face cache into the bundle;
`up --bundle` puts each into the engine host's ~/.cache/pdctl-adapters/<folder> with the
revision marker, so the start script (rendered for a bundle: it fetches nothing) finds it;
without it the script stops with one line. The real sshd test host lo1 shares this filesystem."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from pathlib import Path

import yaml

from pdctl.offline import manifest as mf
from pdctl.offline.adapters import from_cache
from pdctl.offline.download import bundle
from pdctl.offline.ship import bundled, ship
from pdctl.plan import make_plan
from pdctl.render.host import adapter_fetch
from pdctl.spec import load_text
from pdctl.spec.lora import folder
from pdctl.targets.ssh import SshOptions
from tests.helpers import pdctl
from tests.offline.test_ship import spec_file
from tests.offline.test_weights import snapshot

ADAPTER = {"adapter_config.json": b'{"peft_type": "LORA", "r": 8}',
           "adapter_model.safetensors": bytes(range(256)) * 4}


def cache(hub: Path, repo: str, commit: str, **refs: str) -> None:
    """A Hugging Face cache entry as huggingface_hub writes it: snapshots/<commit>, refs/."""
    base = hub / f"models--{repo.replace('/', '--')}"
    snapshot(base / "snapshots" / commit, ADAPTER)
    (base / "refs").mkdir()
    for name, target in refs.items():
        (base / "refs" / name).write_text(target)


def lora(*adapters: dict) -> dict:
    return {"model": {"lora": {"maxLoraRank": 8, "adapters": list(adapters)}}}


def test_the_adapters_come_from_the_cache_by_branch_or_commit_start(tmp_path: Path):
    hub, out, commit = tmp_path / "hub", tmp_path / "b", "5d4c0f1" + "e" * 33
    cache(hub, "org/sql", "a" * 40, main="a" * 40)
    cache(hub, "org/fix", commit)
    over = tmp_path / "lora.yaml"
    over.write_text(yaml.safe_dump(lora({"name": "sql", "hf": "org/sql", "revision": "main"},
                                        {"name": "fix", "hf": "org/fix", "revision": "5d4c0f1"},
                                        {"name": "here", "path": "/srv/adapters/here"})))
    args = ("bundle", "examples/cpu-quickstart.yaml", "--overlay", str(over), "-o", str(out))
    env = {"HF_HUB_CACHE": str(hub)}
    refused = pdctl(*args, env=env)
    assert refused.returncode == 2 and "add --adapters" in refused.stderr, refused.stderr
    made = pdctl(*args, "--adapters", env=env)
    assert made.returncode == 0, made.stderr
    assert "(no wheels; LoRA adapters: 2)" in made.stdout, made.stdout
    manifest = mf.verify(out)
    assert {e.path for e in manifest.files} == {
        f"adapters/{name}/{rel}" for name in ("sql_main", "fix_5d4c0f1") for rel in ADAPTER}
    again = pdctl(*args, "--adapters", env=env)
    assert "LoRA adapters: 0 files copied, 4 already there" in again.stderr, again.stderr

    spec = yaml.safe_load(Path("examples/cpu-quickstart.yaml").read_text())
    spec["model"].update(yaml.safe_load(over.read_text())["model"])
    plan = make_plan(load_text(yaml.safe_dump(spec), "spec.yaml")[0])
    ready, rendered, _ = bundled(plan, out)
    [start] = [a.text for a in rendered.artifacts if a.path.endswith("/start.sh")]
    assert "fetches nothing" in start and "snapshot_download" not in start, start
    assert "snapshot_download" in adapter_fetch(plan, plan.units[0])  # the test can fail


def test_what_cannot_be_bundled_is_said_in_one_line(tmp_path: Path):
    over = tmp_path / "o.yaml"
    args = ("bundle", "examples/cpu-quickstart.yaml", "--overlay", str(over), "-o",
            str(tmp_path / "b"))
    env = {"HF_HUB_CACHE": str(tmp_path / "hub")}
    for adapters, flag, says in (
        ([{"name": "sql", "hf": "org/sql"}], (),
         f"{over}:4: model.lora.adapters[0].revision: adapter sql (org/sql) has no revision"),
        ([{"name": "sql", "hf": "org/sql", "revision": "v1"}], ("--adapters",),
         f"--adapters: org/sql at v1 is not in the Hugging Face cache {tmp_path}/hub"),
        ([{"name": "here", "path": "/srv/a"}], ("--adapters",),
         "--adapters: the spec's engines fetch no LoRA adapter from the Hub"),
    ):
        over.write_text(yaml.safe_dump(lora(*adapters)))
        got = pdctl(*args, *flag, env=env)
        assert got.returncode == 2 and len(got.stderr.strip().splitlines()) == 1, got.stderr
        assert got.stderr.startswith(f"error: {says}"), got.stderr
        assert not (tmp_path / "b").exists()


def test_up_puts_the_adapters_where_the_start_script_finds_them(ssh_env, tmp_path):
    revision = uuid.uuid4().hex + "0" * 8  # a folder of its own in this user's home
    spec = yaml.safe_load(spec_file(ssh_env, tmp_path).read_text())
    spec["model"].update(lora({"name": "sql", "hf": "org/sql", "revision": revision})["model"])
    plan = make_plan(load_text(yaml.safe_dump(spec), "spec.yaml")[0])
    hub, out = tmp_path / "hub", tmp_path / "b"
    cache(hub, "org/sql", revision)
    bundle(plan, (), "", "", out, lambda _: None, None, (), from_cache(plan, hub))
    (out / mf.WHEELS / "vllm-1-py3-none-any.whl").write_bytes(b"w")  # as pip would download
    mf.write(out, mf.Manifest("0", "s", "3.11", "t", (("engines", (plan.release.pip,)),),
                              mf.entries(out)))
    ready, _, manifest = bundled(plan, out)
    there = Path(os.path.expanduser("~/.cache/pdctl-adapters")) / folder(
        plan.spec.model.lora.adapters[0])
    fetch = ["bash", "-c", adapter_fetch(ready, ready.units[0])]
    try:
        options = SshOptions(known_hosts=ssh_env.known_hosts)
        [first] = ship(ready, out, manifest, options)
        assert (first.sent, first.adapters_sent, first.kept) == (3, 2, 0), first
        assert {p.name: p.read_bytes() for p in there.iterdir() if p.is_file()} == {
            **ADAPTER, ".pdctl-revision": revision.encode()}
        found = subprocess.run(fetch, capture_output=True, text=True)
        assert (found.returncode, found.stdout, found.stderr) == (0, "", "")
        [second] = ship(ready, out, manifest, options)
        assert (second.sent, second.kept) == (0, 3), second
        (there / ".pdctl-revision").unlink()
        missing = subprocess.run(fetch, capture_output=True, text=True)
        assert missing.returncode == 1 and missing.stderr.count("\n") == 1, missing
        assert f"LoRA adapter org/sql at {revision} is not in" in missing.stderr
    finally:
        shutil.rmtree(there, ignore_errors=True)
