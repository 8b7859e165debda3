"""Parsers on every recorded real output in tests/fixtures/gpu (copied from ../shared)."""

from __future__ import annotations

import json

import pytest

from pdctl.preflight.cluster import parse_hami_register, parse_node
from pdctl.preflight.gpu import NvmlDump
from pdctl.preflight.registry import host_facts
from tests.preflight.conftest import FIX, raw_of

H200 = FIX / "h200x2"


def test_the_topo_matrix_case_has_an_ansi_header_and_an_empty_field_before_na() -> None:
    """facts/parse_topo_matrix/h200x2-ansi-header-empty-field-before-na.json parses these."""
    text = (H200 / "topo-m.txt").read_text()
    assert "\x1b[4m" in text and "0\t\tN/A" in text


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


def test_hami_register_refuses_a_short_entry() -> None:
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
