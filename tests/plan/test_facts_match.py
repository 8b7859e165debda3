"""`--facts DIR` must be a recording of the spec's hosts: a recording of other machines would
otherwise be ignored (GPUs in listed order, no word said) or pick GPUs the host lacks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT
from tests.helpers import written
from tests.preflight.conftest import pdctl

DOCS = ROOT / "tests" / "data" / "docs"


def _spec(tmp_path: Path, gpus: list[int]) -> Path:
    spec = yaml.safe_load((DOCS / "topo.yaml").read_text())
    spec["hosts"][0]["gpus"] = gpus
    path = written(tmp_path / "spec.yaml", yaml.safe_dump(spec))
    return path


# Every command that takes --facts reads it with the one loader (pdctl.inputs.read_facts):
# `render --facts` of another machine's recording once exited 0 where `up` exited 2.
COMMANDS = {
    "up": ("up", "{spec}", "--dry-run", "--offline", "--facts", "{rec}"),
    "render": ("render", "{spec}", "--facts", "{rec}"),
    "status": ("status", "{spec}", "--facts", "{rec}"),
    "plan": ("plan", "{spec}", "--facts", "{rec}"),
}


def _render(spec: Path, rec: Path, command: str = "up") -> tuple[int, str, str]:
    argv = [a.format(spec=spec, rec=rec) for a in COMMANDS[command]]
    proc = pdctl(*argv)
    return proc.returncode, proc.stdout, proc.stderr


def test_the_recording_of_the_spec_s_host_chooses_by_topology(tmp_path: Path) -> None:
    code, out, err = _render(_spec(tmp_path, [0, 1, 2, 3]), DOCS / "rec-bridged")
    assert code == 0, err
    assert "topo-serve-0  on lo1  GPUs 0,2" in out and "topo-serve-1  on lo1  GPUs 1,3" in out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_recording_without_a_folder_for_any_host_is_refused(tmp_path: Path, command: str) -> None:
    rec = tmp_path / "rec"
    shutil.copytree(DOCS / "rec-bridged" / "lo1", rec / "gpu-a")
    code, out, err = _render(_spec(tmp_path, [0, 1, 2, 3]), rec, command)
    assert (code, out) == (2, ""), err
    assert err.strip().splitlines() == [
        f"error: --facts {rec}: no folder for a host of the spec (it has gpu-a; the spec's hosts "
        f"are lo1); record these hosts with `pdctl preflight SPEC --record {rec}`, or name each "
        "host's folder after its hosts[].name"
    ]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_recording_lacking_gpus_the_spec_lists_is_refused(tmp_path: Path, command: str) -> None:
    code, out, err = _render(
        _spec(tmp_path, [0, 1, 2, 3, 4, 5, 6, 7]), DOCS / "rec-bridged", command
    )
    assert (code, out) == (2, ""), err
    (line,) = err.strip().splitlines()
    assert line.startswith(
        f"error: --facts {DOCS / 'rec-bridged'}: host lo1's recording has GPUs 0,1,2,3, but the "
        "spec lists 4,5,6,7 too"
    ), line
