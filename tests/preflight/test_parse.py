"""Parsers on every recorded real output in tests/fixtures/gpu (copied from ../shared)."""

from __future__ import annotations

import json

import pytest

from pdctl.facts import host_facts
from pdctl.facts.cluster import parse_hami_register, parse_node
from pdctl.facts.gpu import NvmlDump, parse_proc_version, parse_query_gpu, parse_smi_header
from pdctl.facts.system import (
    parse_conda,
    parse_df,
    parse_docker_info,
    parse_ib_listing,
    parse_ib_ports,
    parse_listening,
)
from pdctl.facts.topo import parse_nvlink, parse_p2p, parse_topo_matrix
from tests.preflight.conftest import FIX, raw_of

H200 = FIX / "h200x2"


def test_query_gpu_csv() -> None:
    gpus = parse_query_gpu((H200 / "query-gpu.csv").read_text())
    assert [g.index for g in gpus] == [0, 1]
    g = gpus[1]
    assert (g.name, g.memory_mib, g.memory_used_mib, g.mig_mode, g.compute_cap) == (
        "NVIDIA H200", 143771, 0, "Disabled", "9.0")
    assert g.uuid == "GPU-73c6b780-5a11-d473-9529-079e4b3418c2"
    assert g.pci_bus_id == "00000000:00:07.0"


def test_query_gpu_na_mig_columns() -> None:
    gpus = parse_query_gpu((FIX / "pcie4" / "query-gpu.csv").read_text())
    assert len(gpus) == 4 and gpus[0].mig_mode == "" and gpus[0].compute_cap == "8.9"


def test_topo_matrix_ansi_header_and_empty_field_before_na() -> None:
    text = (H200 / "topo-m.txt").read_text()
    assert "\x1b[4m" in text and "0\t\tN/A" in text  # the fixture really has both
    m = parse_topo_matrix(text)
    assert m.links == ((0, 1, "NV18"),)
    assert m.numa == {0: 0, 1: 0}
    assert m.cpus == {0: "0-31", 1: "0-31"}
    assert m.nics == ()


def test_topo_matrix_h100x8_two_numa_nodes_one_nic() -> None:
    m = parse_topo_matrix((FIX / "h100x8" / "topo-m.txt").read_text())
    assert len(m.links) == 28 and all(level == "NV18" for _, _, level in m.links)
    assert m.numa == {0: 0, 1: 0, 2: 0, 3: 0, 4: 1, 5: 1, 6: 1, 7: 1}
    assert m.cpus[5] == "104-207"
    assert m.nics == ("mlx5_0",)
    assert (0, "mlx5_0", "SYS") in m.nic_links


def test_topo_matrix_dgx_12_nics_truncated() -> None:
    m = parse_topo_matrix((FIX / "dgx-h100-12nic" / "topo-m-truncated.txt").read_text())
    assert len(m.links) == 28
    assert len(m.nics) == 12  # columns NIC0..NIC11 although rows NIC6.. are missing
    pxb = {(g, nic) for g, nic, level in m.nic_links if level == "PXB"}
    assert (0, "NIC0") in pxb and (1, "NIC3") in pxb and (4, "NIC6") in pxb
    assert m.cpus[7] == "56-111,168-223" and m.numa[7] == 1


def test_topo_matrix_pcie_levels() -> None:
    m = parse_topo_matrix((FIX / "pcie4" / "topo-m.txt").read_text())
    assert dict(((a, b), lv) for a, b, lv in m.links) == {
        (0, 1): "SYS", (0, 2): "PIX", (0, 3): "SYS", (1, 2): "SYS", (1, 3): "PIX",
        (2, 3): "SYS"}
    assert m.numa == {0: 0, 1: 1, 2: 0, 3: 1}


@pytest.mark.parametrize("name", ["topo-p2p-r.txt", "topo-p2p-w.txt"])
def test_p2p(name: str) -> None:
    assert parse_p2p((H200 / name).read_text()) == ((0, 1, "OK"), (1, 0, "OK"))


def test_p2p_pcie() -> None:
    p = dict(((a, b), s) for a, b, s in parse_p2p((FIX / "pcie4" / "topo-p2p-r.txt").read_text()))
    assert p[(0, 2)] == "OK" and p[(0, 1)] == "CNS" and len(p) == 12


def test_nvlink() -> None:
    assert parse_nvlink((H200 / "nvlink-s.txt").read_text()) == {0: 18, 1: 18}
    assert parse_nvlink((FIX / "pcie4" / "nvlink-s.txt").read_text()) == {0: 0, 1: 0, 2: 0, 3: 0}
    assert parse_nvlink("GPU 0: X (UUID: a)\n\t Link 0: <inactive>\n\t Link 1: 25 GB/s\n") == {0: 1}


def test_driver_versions() -> None:
    assert parse_proc_version((H200 / "proc-driver-version.txt").read_text()) == "580.159.04"
    assert parse_proc_version((FIX / "pcie4" / "proc-driver-version.txt").read_text()) == (
        "580.95.05")
    assert parse_smi_header((H200 / "nvidia-smi.txt").read_text()) == ("580.159.04", "13.0")


def test_nvml_dump_read_error_and_no_numa() -> None:
    d = NvmlDump((H200 / "nvml.json").read_text())
    assert d.error == "" and d.driver() == "580.159.04" and d.cuda() == "13.0"
    gpus = d.gpus()
    assert gpus[0].numa is None and gpus[0].nvlinks == 18 and gpus[0].memory_mib == 143771
    # NVLink is not a common-ancestor level (anc 30 = PHB): it comes from P2P NVLINK status.
    assert d.links() == ((0, 1, "NV18"),)
    assert d.p2p("r") == ()  # READ raised ArgumentError in that binding version
    assert d.p2p("w") == ((0, 1, "OK"), (1, 0, "OK"))


def test_nvml_no_driver() -> None:
    d = NvmlDump(json.dumps({"error": "NVMLError_LibraryNotFound", "msg": "NVML Shared "
                                                                         "Library Not Found"}))
    assert d.error.startswith("no NVIDIA driver") and d.gpus() == ()


def test_infiniband() -> None:
    assert parse_ib_listing((H200 / "sys-class-infiniband.txt").read_text()) == ()
    assert parse_ib_listing((FIX / "pcie4" / "sys-class-infiniband.txt").read_text()) == (
        "mlx5_0",)
    ports = parse_ib_ports("mlx5_0 1 4:ACTIVE InfiniBand\nmlx5_1 1 1:DOWN Ethernet\n")
    assert [(p.device, p.port, p.state, p.link_layer) for p in ports] == [
        ("mlx5_0", 1, "ACTIVE", "InfiniBand"), ("mlx5_1", 1, "DOWN", "Ethernet")]


def test_df_ports_docker_conda() -> None:
    shm = parse_df((FIX / "pcie4" / "df-shm.txt").read_text())
    assert shm is not None and (shm.mount, shm.total_kib) == ("/dev/shm", 65536)
    assert parse_listening((FIX / "pcie4" / "ports.txt").read_text()) == (22, 8000)
    proc = (FIX / "h200x2-live" / "h200x2" / "ports.txt").read_text()
    assert 2024 in parse_listening(proc)  # /proc/net/tcp: 00000000:07E8 state 0A
    d = parse_docker_info((FIX / "pcie4" / "docker-info.json").read_text())
    assert d.ok and d.version == "26.1.5" and "nvidia" not in d.runtimes
    down = parse_docker_info('{"ServerErrors":["Cannot connect to the Docker daemon"]}')
    assert not down.ok and "Cannot connect" in down.error
    assert parse_conda("conda 24.7.1\n") == "24.7.1"


def test_hami_register_json_with_omitted_zero_fields() -> None:
    text = ('[{"id":"GPU-a","count":10,"devmem":143771,"devcore":100,"type":"NVIDIA-NVIDIA '
            'H200","mode":"hami-core","health":true},{"id":"GPU-b","index":1,"count":10,'
            '"devmem":143771,"devcore":100,"type":"NVIDIA-NVIDIA H200","numa":1}]')
    a, b = parse_hami_register(text)
    assert (a.index, a.numa, a.health, a.mode) == (0, 0, True, "hami-core")
    assert (b.index, b.numa, b.health) == (1, 1, False)  # health omitted = false


def test_hami_register_old_format() -> None:
    text = ("GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,"
            "0,true:GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,10,32768,100,NVIDIA-Tesla "
            "V100-PCIE-32GB,0,false,1,hami-core:")
    a, b = parse_hami_register(text)
    assert (a.count, a.devmem, a.type, a.health, a.index) == (
        10, 32768, "NVIDIA-Tesla V100-PCIE-32GB", True, 0)
    assert (b.health, b.index, b.mode) == (False, 1, "hami-core")
    with pytest.raises(ValueError):
        parse_hami_register("GPU-x,10,32768")


def test_k8s_nodes() -> None:
    items = json.loads((FIX / "k8s" / "_kubernetes" / "nodes.json").read_text())["items"]
    nodes = {n.name: n for n in map(parse_node, items)}
    a, b, c, cpu = nodes["gpu-a"], nodes["gpu-b"], nodes["gpu-c"], nodes["cpu-1"]
    assert a.ready and a.allocatable_gpus == 20 and len(a.hami_devices or ()) == 2
    assert a.product == "NVIDIA-H200" and a.gpu_memory_mib == 143771
    assert a.driver == "580.95.05"
    assert [d.health for d in b.hami_devices or ()] == [True, False]
    assert c.hami_devices is None and c.driver == "535.104.05" and c.allocatable_gpus == 8
    assert cpu.allocatable_gpus == 0


@pytest.mark.parametrize("folder", ["h200x2", "h200x2-live/h200x2", "pcie4", "nodriver"])
def test_host_facts_from_every_folder(folder: str) -> None:
    hf = host_facts("h", raw_of(FIX / folder))
    if folder == "nodriver":
        assert hf.gpus is None and hf.gpu_error.startswith("no NVIDIA driver")
        assert hf.rdma_devices == ()
        return
    assert hf.gpus and hf.driver and hf.links
    assert all(g.numa is not None for g in hf.gpus)


def test_smi_list_memory_and_mig_profiles() -> None:
    from pdctl.facts.gpu import parse_mig_profiles, parse_smi_list, parse_smi_memory

    gpus = parse_smi_list((H200 / "nvidia-smi-L.txt").read_text())
    assert [(g.index, g.name) for g in gpus] == [(0, "NVIDIA H200"), (1, "NVIDIA H200")]
    assert gpus[0].uuid == "GPU-7796f0af-7857-d621-a943-f854d3ee2fd5"
    mem = parse_smi_memory((H200 / "q-memory-compute-clock.txt").read_text())
    assert mem["00000000:00:07.0"] == {"total": 143771, "reserved": 616, "used": 0,
                                       "free": 143156}
    profiles = parse_mig_profiles((H200 / "mig-lgip.txt").read_text())
    assert len(profiles) == 14
    assert (0, "3g.71gb", 9, 2, 69.75) in profiles and (1, "7g.141gb", 0, 1, 140.0) in profiles


def test_list_and_memory_stand_in_for_the_csv() -> None:
    raw = {k: v for k, v in raw_of(H200).items() if k not in ("query-gpu.csv", "nvml.json")}
    hf = host_facts("h", raw)
    assert hf.gpus is not None and [g.memory_mib for g in hf.gpus] == [143771, 143771]
    assert "7g.141gb" in hf.mig_profiles and hf.driver == "580.159.04"


def test_decode_share_is_a_measurement_not_a_probe_output() -> None:
    """decode_share.txt (README: 'a measurement, not a fixture') is never read as a fact."""
    hf = host_facts("h", raw_of(H200))
    assert hf == host_facts("h", {k: v for k, v in raw_of(H200).items()
                                  if k != "decode_share.txt"})
