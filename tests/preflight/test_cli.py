"""`pdctl preflight` and `pdctl render --facts` through the real CLI, on recordings."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import checked, written
from tests.preflight.conftest import FIX, json_findings, pdctl, replay_dir

LIVE = FIX / "h200x2-live"


def test_replay_live_h200_recording_matches_the_device_run() -> None:
    """The recording made on a real 2 x H200 machine replays to the same findings."""
    proc = checked(pdctl("preflight", str(LIVE / "spec.yaml"), "--replay", str(LIVE), "-o", "json"))
    doc = json.loads(proc.stdout)
    recorded = json.loads((LIVE / "preflight.json").read_text())
    # Identical verdicts; the model-fit numbers follow pdctl.capacity as it is refined.
    def key(f: dict[str, str]) -> tuple[str, ...]:
        return (f["status"], f["check"], f["where"], f["found"], f["fix"])

    assert [key(f) for f in doc["findings"]] == [key(f) for f in recorded["findings"]]
    assert [f for f in doc["findings"] if f["check"] != "model.fit"] == [
        f for f in recorded["findings"] if f["check"] != "model.fit"]
    assert doc["counts"] == {"PASS": 9, "WARN": 1, "FAIL": 0}
    tp = next(f for f in doc["findings"] if f["check"] == "tp.nvlink")
    assert tp["found"] == "GPUs 0,1: NV18, NUMA 0"


def test_replay_table_has_every_column(tmp_path: Path) -> None:
    proc = checked(pdctl("preflight", str(LIVE / "spec.yaml"), "--replay", str(LIVE)))
    for word in ("status", "check", "host/node", "found", "expected", "fix", "NV18",
                 "9 PASS, 1 WARN, 0 FAIL"):
        assert word in proc.stdout


def test_shared_fixture_folder_replays_as_it_is(tmp_path: Path) -> None:
    """A folder of real outputs (named as in fixtures/gpu/h200x2) replays directly."""
    folder = tmp_path / "h200x2"
    shutil.copytree(FIX / "h200x2", folder)
    proc = pdctl("preflight", str(LIVE / "spec.yaml"), "--replay", str(folder), "-o", "json")
    assert proc.returncode == 0, proc.stderr
    status = {f["check"]: f["status"] for f in json_findings(proc)}
    assert status["tp.nvlink"] == status["p2p"] == status["gpu.driver"] == "PASS"


def test_fail_exits_1(tmp_path: Path) -> None:
    spec = written(tmp_path / "s.yaml", (LIVE / "spec.yaml").read_text())
    rep = replay_dir(tmp_path, {"h200x2": FIX / "nodriver"})
    proc = checked(pdctl("preflight", str(spec), "--replay", str(rep), "-o", "json"), 1)
    assert json.loads(proc.stdout)["status"] == "FAIL"


def test_usage_errors(tmp_path: Path) -> None:
    proc = pdctl("preflight", str(LIVE / "spec.yaml"), "-o", "yaml")
    assert proc.returncode == 2 and "--output" in proc.stderr
    proc = pdctl("preflight", str(LIVE / "spec.yaml"), "--replay", str(tmp_path / "none"))
    assert proc.returncode == 2 and "recording folder" in proc.stderr and "does not exist" in (
        proc.stderr)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has a GPU")
def test_live_local_without_driver_records_and_replays(tmp_path: Path) -> None:
    """On this machine (no NVIDIA driver) NVML raises NVMLError_LibraryNotFound: a finding."""
    rec = tmp_path / "rec"
    live = pdctl("preflight", str(LIVE / "spec.yaml"), "--record", str(rec), "-o", "json")
    assert live.returncode == 1, live.stderr
    drv = next(f for f in json_findings(live) if f["check"] == "gpu.driver")
    assert drv["status"] == "FAIL" and "no NVIDIA driver" in drv["found"]
    nvml = json.loads((rec / "h200x2" / "nvml.json").read_text())
    assert nvml["error"] == "NVMLError_LibraryNotFound"
    assert (rec / "h200x2" / "df-shm.txt").read_text().startswith("Filesystem")
    again = pdctl("preflight", str(LIVE / "spec.yaml"), "--replay", str(rec), "-o", "json")
    assert json_findings(again) == json_findings(live)


def test_render_facts_places_tp_groups_by_topology(tmp_path: Path) -> None:
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: t\nphase: 0\nmodel: {name: meta-llama/Llama-3.1-8B-Instruct}\n"
        "hosts:\n  - {name: g, address: 10.0.0.1, gpus: [0, 1, 2, 3], runtime: docker}\n"
        "serve: {replicas: 2, tensorParallel: 2}\n")
    rep = replay_dir(tmp_path, {"g": FIX / "pcie4"})
    plain = pdctl("render", str(spec))
    placed = pdctl("render", str(spec), "--facts", str(rep))
    assert plain.returncode == placed.returncode == 0, placed.stderr
    assert "device=0,1" in plain.stdout and "device=2,3" in plain.stdout
    assert "device=0,2" in placed.stdout and "device=1,3" in placed.stdout
    assert pdctl("render", str(spec)).stdout == plain.stdout  # deterministic without facts
    assert pdctl("render", str(spec), "--facts", str(rep)).stdout == placed.stdout


def test_host_folder_for_a_kubernetes_plan_is_refused() -> None:
    proc = pdctl("preflight", str(FIX.parents[2] / "examples" / "phase1-k8s.yaml"), "--replay",
                 str(FIX / "pcie4"))
    assert proc.returncode == 1 and "_kubernetes/" in proc.stderr


@pytest.mark.parametrize("command", ["render", "preflight"])
@pytest.mark.parametrize("kind", ["missing", "file"])
def test_missing_recording_folder_is_a_one_line_usage_error(
    tmp_path: Path, command: str, kind: str
) -> None:
    folder = tmp_path / "nonexistent"
    if kind == "file":
        folder.write_text("not a folder\n")
    option = "--facts" if command == "render" else "--replay"
    proc = checked(pdctl(command, str(LIVE / "spec.yaml"), option, str(folder)), 2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and str(folder) in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr
