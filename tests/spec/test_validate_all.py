"""`validate` (and every command's spec loading) reports every independent problem, one line
each (`file:line: field: what; fix`), capped, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdctl.spec.load import MAX_PROBLEMS
from tests.helpers import cli, run_cli, written

# Three independent problems, in three sections, on lines 4, 8 and 11.
THREE = """\
name: demo
model:
  name: org/model
  maxModelLen: 4
hosts:
  - name: gpu-a
    address: 192.0.2.10
    gpus: [0, 0]
serve:
  replicas: 1
  tensorParalel: 2
"""

# Phase 3: pydantic errors plus one section's own check (a SpecError raised by the
# disaggregation section's validator), which stops pydantic: the other sections still count.
WITH_SECTION_CHECK = """\
name: demo
phase: 3
model:
  name: org/model
kubernetes:
  namespace: Not_A_Label
prefill: {replicas: 1}
decode:
  replicas: 2
disaggregation:
  connector: nixl
  deviceName: mlx5_0
serve:
  replicas: 0
"""


def errors(err: str) -> list[str]:
    lines = err.splitlines()
    assert lines and all(line.startswith("error: ") for line in lines), err
    return lines


@pytest.mark.parametrize("command", ["validate", "render", "plan"])
def test_three_problems_three_lines(command: str, tmp_path: Path, capsys) -> None:
    spec = written(tmp_path / "spec.yaml", THREE)
    code, out, err = run_cli([command, str(spec)], capsys)
    assert code == 2 and not out
    lines = errors(err)
    assert len(lines) == 3, err
    assert lines[0].startswith(f"error: {spec}:4: model.maxModelLen: must be >= 16")
    assert lines[1].startswith(f"error: {spec}:8: hosts[0].gpus: GPU indices repeat")
    assert lines[2].startswith(f"error: {spec}:11: serve.tensorParalel: unknown key")
    assert "did you mean 'tensorParallel'" in lines[2]


def test_a_section_check_does_not_hide_the_others(tmp_path: Path, capsys) -> None:
    spec = written(tmp_path / "spec.yaml", WITH_SECTION_CHECK)
    _, err = cli(["validate", str(spec)], 2)
    lines = errors(err)
    assert [line.split(": ")[1:3] for line in lines] == [
        [f"{spec}:6", "kubernetes.namespace"], [f"{spec}:12", "disaggregation.deviceName"],
        [f"{spec}:14", "serve.replicas"],
    ], err


def test_one_problem_is_still_one_line(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        THREE.replace("maxModelLen: 4", "maxModelLen: 4096")
        .replace("[0, 0]", "[0, 1]")
        .replace("tensorParalel", "tensorParallel")
    )
    spec.write_text(spec.read_text().replace("serve:\n  replicas: 1", "serve:\n  replicas: 0"))
    _, err = cli(["validate", str(spec)], 2)
    assert errors(err) == [f"error: {spec}:10: serve.replicas: must be >= 1 (got 0)"]


def test_many_problems_are_capped(tmp_path: Path, capsys) -> None:
    hosts = "".join(
        f"  - {{name: h{i}, address: 192.0.2.{i + 1}, gpus: [0], port: 0}}\n" for i in range(30)
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: demo\nmodel: {{name: org/model}}\nhosts:\n{hosts}")
    _, err = cli(["validate", str(spec)], 2)
    lines = errors(err)
    assert len(lines) == MAX_PROBLEMS + 1, err
    assert lines[0].startswith(f"error: {spec}:4: hosts[0].port: must be >= 1")
    assert lines[-2].startswith(f"error: {spec}:{3 + MAX_PROBLEMS}: hosts[{MAX_PROBLEMS - 1}]")
    assert lines[-1] == f"error: {spec}: ... and {30 - MAX_PROBLEMS} more problems"


def test_stray_keys_of_one_mapping_share_a_line(tmp_path: Path, capsys) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: demo\nmodel: {name: org/model}\nzzz1: 1\nzzz2: 2\nzzz3: 3\n")
    _, err = cli(["validate", str(spec)], 2)
    (line,) = errors(err)
    assert line.startswith(
        f"error: {spec}:3: zzz1: unknown key 'zzz1', and 2 more ('zzz2', 'zzz3')"
    )
