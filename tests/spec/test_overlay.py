"""`--overlay FILE`: a base spec deep-merged with overlays; an error names the file and line
that set the value (the overlay's, not the base's)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from pdctl.errors import SpecError
from pdctl.spec.overlay import merge
from pdctl.spec.source import parse
from tests.conftest import ROOT
from tests.helpers import cli, run_cli

BASE = """\
name: demo
model:
  name: org/model
  maxModelLen: 8192
engine:
  env: {A: "1", B: "2"}
hosts:
  - name: gpu-a
    address: 192.0.2.10
    gpus: [0, 1]
  - name: gpu-b
    address: 192.0.2.11
    gpus: [0]
serve:
  replicas: 2
  extraArgs: [--enforce-eager, --seed=1]
"""

COMMANDS = ["render", "validate", "plan", "up", "down", "status", "logs", "top", "diff"]


def merged(base: str, *overlays: str) -> dict:
    parts = [parse(base, "base.yaml")]
    parts += [parse(text, f"o{i}.yaml") for i, text in enumerate(overlays, 1)]
    return merge(*parts)[0]


def write(tmp_path: Path, **files: str) -> dict[str, str]:
    out = {}
    for name, text in files.items():
        (tmp_path / f"{name}.yaml").write_text(text)
        out[name] = str(tmp_path / f"{name}.yaml")
    return out


def test_mappings_merge_lists_replace_null_removes() -> None:
    data = merged(
        BASE,
        "engine: {env: {B: '3', C: '4'}}\nserve: {extraArgs: [--seed=2], replicas: null}\n"
        "model: {maxModelLen: null}\n",
    )
    assert data["engine"]["env"] == {"A": "1", "B": "3", "C": "4"}
    assert data["serve"] == {"extraArgs": ["--seed=2"]}
    assert data["model"] == {"name": "org/model"}
    assert data["hosts"][0]["gpus"] == [0, 1]


def test_hosts_merge_by_name_add_and_delete() -> None:
    data = merged(
        BASE,
        "hosts:\n  - {name: gpu-c, address: 192.0.2.12, gpus: [3]}\n"
        "  - {name: gpu-a, gpus: [2]}\n  - {name: gpu-b, $delete: true}\n",
    )
    assert data["hosts"] == [
        {"name": "gpu-a", "address": "192.0.2.10", "gpus": [2]},
        {"name": "gpu-c", "address": "192.0.2.12", "gpus": [3]},
    ]


def test_later_overlays_win() -> None:
    data = merged(BASE, "serve: {replicas: 3}\n", "serve: {replicas: 4}\n")
    assert data["serve"]["replicas"] == 4


@pytest.mark.parametrize(
    ("overlay", "file", "line", "phrase"),
    [
        ("hosts:\n  - {name: gpu-x, $delete: true}\n", "o1.yaml", 2, "no entry with name 'gpu-x'"),
        ("hosts:\n  - {address: 192.0.2.9}\n", "o1.yaml", 2, "needs `name`"),
        ("hosts:\n  - {name: gpu-a, $delete: yes please}\n", "o1.yaml", 2, "true or false"),
        ("- just a list\n", "o1.yaml", 1, "must be a mapping"),
        (
            "hosts:\n  - {name: gpu-c, address: 192.0.2.12}\n  - {name: gpu-c, gpus: [1]}\n",
            "o1.yaml", 3, "'gpu-c' is listed twice",
        ),
    ],
)
def test_bad_overlay_is_located(overlay: str, file: str, line: int, phrase: str) -> None:
    with pytest.raises(SpecError) as caught:
        merged(BASE, overlay)
    assert (caught.value.file, caught.value.line_no) == (file, line)
    assert phrase in caught.value.message


def test_error_locations(tmp_path: Path, capsys) -> None:
    """Base-only, overlay-only, a host added by an overlay, a host changed by one, and a
    value of the second overlay: each names the file and line that set it."""
    f = write(
        tmp_path,
        base=BASE.replace("maxModelLen: 8192", "maxModelLen: 4"),  # base line 4
        one=(
            "serve:\n  replicas: 0\n"  # one line 2
            "hosts:\n"
            "  - name: gpu-new\n    address: 192.0.2.20\n    gpus: [1, 1]\n"  # one line 6
            "  - name: gpu-b\n    port: 70000\n"  # one line 8
        ),
        two="engine:\n  version: not-a-version\n",  # two line 2
    )
    code, _, err = run_cli(
        ["validate", f["base"], "--overlay", f["one"], "--overlay", f["two"]], capsys
    )
    assert code == 2
    got = [line.split(": ")[1:3] for line in err.splitlines()]
    assert got == [
        [f"{f['base']}:4", "model.maxModelLen"], [f"{f['one']}:2", "serve.replicas"],
        [f"{f['one']}:6", "hosts[2].gpus"], [f"{f['one']}:8", "hosts[1].port"],
        [f"{f['two']}:2", "engine.version"],
    ], err


def test_plan_error_names_the_overlay(tmp_path: Path, capsys) -> None:
    """A check made when planning (not by the models) also points at the overlay's line."""
    one = "hosts:\n  - {name: gpu-b, $delete: true}\n  - name: gpu-a\n    gpus: [0, 1, 2]\n"
    f = write(tmp_path, base=BASE, one=one + "serve:\n  tensorParallel: 2\n")
    _, err = cli(["render", f["base"], "--overlay", f["one"]], 2)
    assert err.startswith(f"error: {f['one']}:4: hosts[0].gpus: host gpu-a lists 3 GPUs"), err


def test_a_base_error_merged_over_is_gone(tmp_path: Path, capsys) -> None:
    f = write(
        tmp_path, base=BASE.replace("replicas: 2", "replicas: 0"), one="serve: {replicas: 1}\n"
    )
    code, _, err = run_cli(["validate", f["base"]], capsys)
    assert code == 2 and ":15: serve.replicas" in err
    out, err = cli(["validate", f["base"], "--overlay", f["one"]])
    assert "ok: demo" in out


def test_render_applies_the_overlay(tmp_path: Path, capsys) -> None:
    f = write(tmp_path, base=BASE, one="hosts:\n  - {name: gpu-b, $delete: true}\n")
    code, plain, _ = run_cli(["render", f["base"]], capsys)
    assert code == 0 and "gpu-b" in plain
    out, err = cli(["render", f["base"], "--overlay", f["one"]])
    assert "gpu-a" in out and "gpu-b" not in out


def test_missing_overlay_file(tmp_path: Path, capsys) -> None:
    f = write(tmp_path, base=BASE)
    code, _, err = run_cli(
        ["validate", f["base"], "--overlay", str(tmp_path / "nope.yaml")], capsys
    )
    assert code == 2
    nope = tmp_path / "nope.yaml"
    assert err == f"error: {nope}: no such file; check the path, or create one with `pdctl init`\n"


@pytest.mark.parametrize("command", COMMANDS)
def test_every_spec_command_takes_overlay(command: str, capsys) -> None:
    out, _ = cli([command, "--help"])
    assert "--overlay FILE" in out


def test_example_pair() -> None:
    base = ROOT / "examples" / "overlays" / "base.yaml"
    prod = ROOT / "examples" / "overlays" / "prod.yaml"
    data = merged(base.read_text(), prod.read_text())
    assert data["kubernetes"]["namespace"] == "vllm-prod"
    assert data["kubernetes"]["storage"] == {
        "type": "pvc", "size": "100Gi", "accessMode": "ReadWriteMany", "storageClass": "cephfs",
    }
    assert data["kubernetes"]["labels"] == {"team": "inference", "env": "prod"}
    assert yaml.safe_load(base.read_text())["serve"]["replicas"] == 1
    assert data["serve"]["replicas"] == 3


def test_stdin_base_with_overlay(tmp_path: Path, capsys, monkeypatch) -> None:
    f = write(tmp_path, one="serve:\n  replicas: 0\n")
    monkeypatch.setattr("sys.stdin", io.StringIO(BASE))
    _, err = cli(["validate", "-", "--overlay", f["one"]], 2)
    assert err.startswith(f"error: {f['one']}:2: serve.replicas: must be >= 1"), err
    monkeypatch.setattr("sys.stdin", io.StringIO(BASE))
    _, err = cli(["validate", "-", "--overlay", "-"], 2)
    assert err == "error: SPEC and an --overlay cannot both be - (stdin); give a file\n"
