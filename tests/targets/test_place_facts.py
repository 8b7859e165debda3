"""`up --facts DIR` deploys the topology-aware placement, and status/down find the same units
(docs/placement.md): facts choose GPUs inside a host, never the host, so unit names and hosts
do not depend on them; status compares start scripts, so it takes the same --facts."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.helpers import checked
from tests.preflight.conftest import FIX, raw_of
from tests.targets.hosts.test_ssh_up import free_port, known
from tests.targets.testbed import (
    SshEnv,
    listening,
    lo1_spec,
    pdctl,
    processes_in,
    status_rows,
    write_spec,
)

# 4 PCIe GPUs with NVLink bridges 0-2 and 1-3: listed order would pair 0,1 (PHB).
BRIDGED = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tPHB\tNV2\tPHB\t0-63\t0\t\tN/A\n"
    "GPU1\tPHB\t X \tPHB\tNV2\t0-63\t0\t\tN/A\n"
    "GPU2\tNV2\tPHB\t X \tPHB\t0-63\t0\t\tN/A\n"
    "GPU3\tPHB\tNV2\tPHB\t X \t0-63\t0\t\tN/A\n"
)


def _recording(root: Path, host: str) -> Path:
    folder = root / "facts" / host
    folder.mkdir(parents=True)
    raw = raw_of(FIX / "pcie4")
    raw["topo-m.txt"] = BRIDGED
    for name, text in raw.items():
        (folder / name).write_text(text)
    return root / "facts"


def _rows(spec: Path, env: SshEnv, *extra: str) -> dict[str, dict]:
    return status_rows(spec, *known(env), *extra, code=0)


def test_up_with_facts_places_by_topology_and_status_down_find_it(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
) -> None:
    port = free_port()
    spec = lo1_spec(ssh_env, tmp_path, "topo", fake_venv, port, {}, host={"gpus": [0, 1, 2, 3]},
                    replicas=2)
    data = yaml.safe_load(spec.read_text())
    data["serve"]["tensorParallel"] = 2
    write_spec(spec, data)
    facts = _recording(tmp_path, "lo1")
    try:
        dry = checked(pdctl("up", str(spec), "--dry-run", "--offline", "--facts", str(facts)))
        assert f"topo-serve-0  on lo1  GPUs 0,2  port {port}" in dry.stdout, dry.stdout
        assert f"topo-serve-1  on lo1  GPUs 1,3  port {port + 1}" in dry.stdout
        up = ["up", str(spec), "--yes", "--facts", str(facts), *known(ssh_env), "--timeout", "60"]
        checked(pdctl(*up))
        start = (tmp_path / "lo1" / "topo" / "topo-serve-0" / "start.sh").read_text()
        assert "CUDA_VISIBLE_DEVICES=0,2" in start
        same = _rows(spec, ssh_env, "--facts", str(facts))
        assert {r["state"] for r in same.values()} == {"running"}
        assert {r["health"] for r in same.values()} == {"healthy"}
        # Without the recording the units are the same (names, host), their GPUs differ.
        plain = _rows(spec, ssh_env)
        assert set(plain) == set(same)
        assert {r["state"] for r in plain.values()} == {"running (outdated)"}
        down = pdctl("down", str(spec), *known(ssh_env))  # needs no facts
        assert down.returncode == 0, down.stdout + down.stderr
        assert "stopped topo-serve-0" in down.stdout and "stopped topo-serve-1" in down.stdout
        assert not listening(port) and not listening(port + 1)
        assert processes_in(tmp_path) == []
    finally:
        pdctl("down", str(spec), *known(ssh_env))
