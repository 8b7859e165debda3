"""Checks over recorded facts: real H200 outputs, a PCIe-only host, a host with no driver."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

from pdctl.compat import release
from pdctl.plan import make_plan
from pdctl.plan.topology import best_group, chooser
from pdctl.preflight.facts import Facts, Port
from pdctl.preflight.finding import worst
from pdctl.preflight.registry import facts_from, host_facts, run_checks
from pdctl.spec import load_text
from tests.conftest import ROOT
from tests.helpers import plan_of, written
from tests.preflight.conftest import FIX, by_check, findings, raw_of, spec_text

H200 = "  - {name: g, address: 10.0.0.1, gpus: [0, 1], runtime: venv, venv: /opt/v}"
PCIE = "  - {name: g, address: 10.0.0.1, gpus: [0, 1, 2, 3], runtime: docker}"


def test_h200_tp2_passes_gpu_and_topology_checks() -> None:
    found = findings(spec_text(H200), {"g": raw_of(FIX / "h200x2")})
    status = {f.check: f.status for f in found}
    assert status["gpu.count"] == status["gpu.driver"] == status["gpu.mig"] == "PASS"
    (tp,) = by_check(found, "tp.nvlink")
    assert tp.status == "PASS" and "NV18" in tp.found and "NUMA 0" in tp.found
    (p2p,) = by_check(found, "p2p")
    assert p2p.status == "PASS"
    (fit,) = by_check(found, "model.fit")
    assert fit.status == "PASS"
    # The shared recording has no df/ports: reported, not guessed.
    assert by_check(found, "host.shm")[0].status == "WARN"
    assert worst(found) == "WARN"


def test_live_h200_recording_all_pass_but_runtime() -> None:
    found = findings(spec_text(H200.replace("/opt/v", "/opt/torch/.venv")),
                     {"g": raw_of(FIX / "h200x2-live" / "h200x2")})
    assert {f.check for f in found if f.status != "PASS"} == {"host.runtime"}


def test_missing_gpu_index_fails() -> None:
    hosts = "  - {name: g, address: 10.0.0.1, gpus: [0, 1, 2, 3], runtime: venv, venv: /v}"
    found = findings(spec_text(hosts, "{replicas: 2, tensorParallel: 2}"),
                     {"g": raw_of(FIX / "h200x2")})
    (count,) = by_check(found, "gpu.count")
    assert count.status == "FAIL" and "hosts[0].gpus" in count.expected
    found = findings(spec_text(hosts), {"g": raw_of(FIX / "h200x2")})  # uses 0,1 only
    assert [f.status for f in by_check(found, "gpu.count")] == ["PASS", "WARN"]


def test_pcie_only_host() -> None:
    serve = "{replicas: 2, tensorParallel: 2, port: 8000}"
    found = findings(spec_text(PCIE, serve), {"g": raw_of(FIX / "pcie4")})
    tp = by_check(found, "tp.nvlink")
    # first_free puts GPUs 0,1 together: SYS across NUMA nodes; 0,2 share a PCIe switch.
    assert tp[0].status == "WARN" and "GPUs 0,1: SYS" in tp[0].found
    assert "use GPUs 0,2 (PIX, NUMA 0)" in tp[0].fix
    p2p = by_check(found, "p2p")
    assert p2p[0].status == "WARN" and "CNS" in p2p[0].found
    status = {f.check: f.status for f in found}
    assert status["host.shm"] == "FAIL"  # 64 MiB /dev/shm with TP=2
    assert status["host.runtime"] == "WARN"  # docker without the nvidia runtime
    assert status["host.ports"] == "FAIL"  # 8000 is taken
    assert status["host.disk"] == "FAIL"  # 9.8 GiB free for 15 GiB of weights
    assert status["model.fit"] == "PASS"
    assert worst(found) == "FAIL"


def test_pcie_best_set_is_pass_when_placed_by_topology() -> None:
    facts = facts_from({"g": raw_of(FIX / "pcie4")})
    plan = plan_of(spec_text(PCIE, "{replicas: 2, tensorParallel: 2}"), choose=chooser(facts))
    assert [i.gpus for i in plan.instances] == [(0, 2), (1, 3)]
    tp = by_check(run_checks(plan, facts), "tp.nvlink")
    assert [f.status for f in tp] == ["WARN", "WARN"]  # still PCIe, but no better set exists
    assert all("no NVLink-joined set" in f.fix for f in tp)


def test_no_driver_host() -> None:
    found = findings(spec_text(H200.replace("venv, venv: /opt/v", "conda")),
                     {"g": raw_of(FIX / "nodriver")})
    (drv,) = by_check(found, "gpu.driver")
    assert drv.status == "FAIL" and "no NVIDIA driver" in drv.found
    assert not by_check(found, "tp.nvlink")
    assert by_check(found, "host.runtime")[0].status == "PASS"  # conda 24.7.1


def _facts_with(**changes) -> Facts:
    hf = host_facts("g", raw_of(FIX / "h200x2"))
    return Facts(hosts=(replace(hf, **changes),))


def test_old_driver_and_module_mismatch() -> None:
    found = findings(spec_text(H200), _facts_with(driver="550.54.15", kernel_module="550.54.14"))
    drv = by_check(found, "gpu.driver")
    assert [f.status for f in drv] == ["FAIL", "FAIL"]
    assert "580.65.06" in drv[0].expected
    # an engine built for CUDA 12 needs its own minimum, from the compatibility table
    rel = release("0.15.0")
    assert rel.cuda_major == 12
    old = findings(spec_text(H200).replace("'0.33.0'", "'0.15.0'"), _facts_with(driver="450.1"))
    assert rel.min_driver in by_check(old, "gpu.driver")[0].expected


def test_mig_enabled_fails() -> None:
    hf = host_facts("g", raw_of(FIX / "h200x2"))
    gpus = tuple(replace(g, mig_mode="Enabled") for g in hf.gpus or ())
    found = findings(spec_text(H200), Facts(hosts=(replace(hf, gpus=gpus),)))
    assert by_check(found, "gpu.mig")[0].status == "FAIL"


def test_model_too_big_fails_last() -> None:
    text = spec_text(H200, "{replicas: 2, tensorParallel: 1}",
                     model="meta-llama/Llama-3.1-70B-Instruct")
    found = findings(text, {"g": raw_of(FIX / "h200x2")})
    assert found[-1].check == "model.fit" and found[-1].status == "FAIL"
    assert "tensorParallel" in found[-1].fix


def test_rdma_protocol_without_devices_warns() -> None:
    text = (FIX.parents[2] / "examples" / "phase2-mooncake-rdma.yaml").read_text()
    plan = plan_of(text)
    raw = {h.name: raw_of(FIX / "h200x2") for h in plan.hosts_used()}
    rdma = by_check(run_checks(plan, facts_from(raw)), "host.rdma")
    assert rdma and all(f.status == "WARN" and "tcp" in f.fix for f in rdma)
    active = {name: host_facts(name, files) for name, files in raw.items()}
    facts = Facts(hosts=tuple(
        replace(hf, rdma_devices=("mlx5_0", "mlx5_1"),
                rdma_ports=(Port("mlx5_0", 1, "ACTIVE", "InfiniBand"),
                            Port("mlx5_1", 1, "ACTIVE", "InfiniBand")))
        for hf in active.values()))
    assert all(f.status == "PASS" for f in by_check(run_checks(plan, facts), "host.rdma"))


def test_unreachable_and_unrecorded_hosts_fail() -> None:
    found = findings(spec_text(H200), {"g": {"ssh.err": "host g: cannot connect\n"}})
    assert [(f.check, f.status) for f in found[:1]] == [("host.reach", "FAIL")]
    found = findings(spec_text(H200), {})
    assert found[0].check == "host.facts" and found[0].status == "FAIL"


# Topology-aware placement: TP groups in one NVLink island and NUMA node, decode next to
# prefill over NVLink on a shared host; P2P checks for P2pNccl pairs.
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
    plan = plan_of((ROOT / "examples" / "phase2-p2p-nccl.yaml").read_text())
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
    spec = written(tmp_path / "s.yaml", (ROOT / "examples" / "phase2-p2p-nccl.yaml").read_text())
    rep = tmp_path / "rep" / "gpu-a"
    rep.mkdir(parents=True)
    (rep / "topo-m.txt").write_text(BRIDGED)
    proc = subprocess.run([sys.executable, "-c", code, str(spec), str(tmp_path / "rep")],
                          capture_output=True, text=True, cwd=ROOT)
    assert "HEAVY=" in proc.stderr and proc.stderr.rsplit("HEAVY=", 1)[1] == ""
    assert "CUDA_VISIBLE_DEVICES" in proc.stdout
