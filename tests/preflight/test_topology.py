"""Topology-aware placement: TP groups in one NVLink island and NUMA node, decode next to
prefill over NVLink on a shared host; P2P checks for P2pNccl pairs."""

from __future__ import annotations

import subprocess
import sys

from pdctl.plan import make_plan
from pdctl.plan.topology import best_group, chooser
from pdctl.preflight.facts import Facts
from pdctl.preflight.registry import facts_from, host_facts, run_checks
from pdctl.spec import load_text
from tests.conftest import ROOT
from tests.preflight.conftest import FIX, raw_of

# 4 PCIe GPUs with NVLink bridges between 0-2 and 1-3 (written by the `topo -m` legend).
BRIDGED = (
    "\tGPU0\tGPU1\tGPU2\tGPU3\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
    "GPU0\t X \tPHB\tNV2\tPHB\t0-63\t0\t\tN/A\n"
    "GPU1\tPHB\t X \tPHB\tNV2\t0-63\t0\t\tN/A\n"
    "GPU2\tNV2\tPHB\t X \tPHB\t0-63\t0\t\tN/A\n"
    "GPU3\tPHB\tNV2\tPHB\t X \t0-63\t0\t\tN/A\n"
)


def _bridged() -> Facts:
    raw = raw_of(FIX / "pcie4")
    raw["topo-m.txt"] = BRIDGED
    return Facts(hosts=(host_facts("gpu-a", raw),))


def _h100() -> Facts:
    raw = {"topo-m.txt": (FIX / "h100x8" / "topo-m.txt").read_text(),
           "query-gpu.csv": "index, name, memory.total [MiB]\n"
           + "".join(f"{i}, NVIDIA H100 80GB HBM3, 81559 MiB\n" for i in range(8))}
    return Facts(hosts=(host_facts("g", raw),))


def test_tp_groups_stay_in_one_numa_node() -> None:
    hf = _h100().hosts[0]
    # All pairs are NV18; first_free would take 2,3,4,5 across NUMA nodes 0 and 1.
    assert best_group(hf, [2, 3, 4, 5, 6, 7], 3) == (4, 5, 6)
    assert best_group(hf, [2, 3, 4, 5, 6, 7], 4) == (4, 5, 6, 7)
    assert best_group(hf, [2, 3, 4, 5, 6, 7], 2) == (2, 3)


def test_decode_lands_next_to_prefill_over_nvlink() -> None:
    text = (ROOT / "examples" / "phase2-p2p-nccl.yaml").read_text()
    text = text.replace("prefill: {replicas: 1, tensorParallel: 2",
                        "prefill: {replicas: 1, tensorParallel: 1")
    text = text.replace("decode: {replicas: 2, tensorParallel: 1",
                        "decode: {replicas: 1, tensorParallel: 1")
    spec, _ = load_text(text, "s.yaml")
    plain = make_plan(spec)
    placed = make_plan(spec, choose=chooser(_bridged()))
    gpus = {i.role: i.gpus for i in plain.instances if i.gpus}
    assert gpus == {"prefill": (0,), "decode": (1,)}
    gpus = {i.role: i.gpus for i in placed.instances if i.gpus}
    assert gpus == {"prefill": (0,), "decode": (2,)}  # NV2 to the prefill GPU
    env = {i.role: dict(i.env).get("CUDA_VISIBLE_DEVICES") for i in placed.instances if i.gpus}
    assert env == {"prefill": "0", "decode": "2"}


def test_p2p_nccl_pairs_are_checked() -> None:
    spec, _ = load_text((ROOT / "examples" / "phase2-p2p-nccl.yaml").read_text(), "s.yaml")
    plan = make_plan(spec)
    found = run_checks(plan, facts_from({"gpu-a": raw_of(FIX / "pcie4")}))
    pairs = [f for f in found if f.check == "p2p" and "+" in f.where]
    assert len(pairs) == 2  # the prefill instance with each decode instance
    assert all(f.status == "WARN" and "CNS" in f.found for f in pairs)


def test_chooser_without_facts_for_a_host_keeps_listed_order() -> None:
    text = (ROOT / "examples" / "phase0-multihost.yaml").read_text()
    spec, _ = load_text(text, "s.yaml")
    assert make_plan(spec, choose=chooser(Facts())) == make_plan(spec)


def test_render_with_facts_imports_no_heavy_client(tmp_path) -> None:
    code = (
        "import sys\n"
        "sys.argv = ['pdctl', 'render', sys.argv[1], '--facts', sys.argv[2]]\n"
        "from pdctl.cli.app import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in sys.modules if m.split('.')[0] in "
        "('paramiko', 'docker', 'kubernetes', 'pynvml')]\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy))\n"
    )
    spec = tmp_path / "s.yaml"
    spec.write_text((ROOT / "examples" / "phase2-p2p-nccl.yaml").read_text())
    rep = tmp_path / "rep" / "gpu-a"
    rep.mkdir(parents=True)
    (rep / "topo-m.txt").write_text(BRIDGED)
    proc = subprocess.run([sys.executable, "-c", code, str(spec), str(tmp_path / "rep")],
                          capture_output=True, text=True, cwd=ROOT)
    assert "HEAVY=" in proc.stderr and proc.stderr.rsplit("HEAVY=", 1)[1] == ""
    assert "CUDA_VISIBLE_DEVICES" in proc.stdout
