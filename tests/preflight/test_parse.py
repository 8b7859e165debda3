"""Parsers on every recorded real output in tests/fixtures/gpu (copied from ../shared)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pdctl.plan import make_plan
from pdctl.preflight.cluster import parse_hami_register, parse_node
from pdctl.preflight.facts import CLUSTER
from pdctl.preflight.gpu import NvmlDump
from pdctl.preflight.registry import facts_from, host_facts, run_checks
from pdctl.spec import load_text
from tests.helpers import run_cli
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


# A damaged or hostile recording (`preflight --replay DIR`, or a host whose tools print garbage)
# never crashes the parsers: every raw output file, replaced by hostile text, still gives facts
# and findings. Generated payloads, not copied ones.
LIVE = FIX / "h200x2-live"
HOST_FILES = (
    "query-gpu.csv", "topo-m.txt", "topo-p2p-r.txt", "topo-p2p-w.txt", "nvlink-s.txt",
    "nvidia-smi.txt", "proc-driver-version.txt", "q-memory-compute-clock.txt", "mig-lgip.txt",
    "nvml.json", "sys-class-infiniband.txt", "infiniband-ports.txt", "df-shm.txt",
    "df-cache.txt", "du-model.txt", "docker-info.json", "conda-version.txt", "ports.txt",
    "hostname.txt", "venv.txt", "libraries.txt",
)
CLUSTER_FILES = ("nodes.json", "workloads.json", "crds.json")


def _payloads() -> dict[str, str]:
    rng = random.Random(7)
    big = "9" * 5000
    return {
        "nul": "index, name\n0\x00, H200\x00\n" * 3,
        "binary": bytes(rng.randrange(256) for _ in range(4096)).decode("latin-1"),
        "bigint": f"{big}\n{{\"a\": {big}}}\nindex, memory.total [MiB]\n{big}, {big} MiB\n",
        "unicode-digits": "index, memory.total [MiB]\n\u00b2, \u0663\u0663 MiB\nGPU\u00b2 X\n",
        "deep-json": "[" * 5000 + "]" * 5000,
        "json-list": json.dumps([1, "x", None, {"items": "no"}]),
        "json-wrong-types": json.dumps({"items": [{"metadata": "x", "status": 3}],
                                         "ServerVersion": ["x"], "Runtimes": "x"}),
        "long-line": "GPU0 " + "X" * 200_000 + "\n",
        "ansi": "\x1b[4mGPU0\tGPU1\x1b[0m\nGPU0\tX\tNV18\nGPU1\tNV18\tX\n\x1b[",
    }


def _spec() -> str:
    return (LIVE / "spec.yaml").read_text()


@pytest.mark.parametrize("payload", sorted(_payloads()))
def test_hostile_host_output_gives_findings(payload: str) -> None:
    spec, _ = load_text(_spec(), "spec.yaml")
    plan = make_plan(spec)
    base = raw_of(LIVE / "h200x2")
    text = _payloads()[payload]
    for name in HOST_FILES:
        raw = {"h200x2": {**base, name: text}}
        facts = facts_from(raw)
        assert run_checks(plan, facts), name


@pytest.mark.parametrize("payload", sorted(_payloads()))
def test_hostile_cluster_output_gives_facts(payload: str) -> None:
    text = _payloads()[payload]
    for name in CLUSTER_FILES:
        facts_from({CLUSTER: {n: (text if n == name else "{}") for n in CLUSTER_FILES}})


def test_hostile_replay_through_the_cli_is_not_a_traceback(tmp_path: Path, capsys) -> None:
    root = tmp_path / "rec" / "h200x2"
    root.mkdir(parents=True)
    for name, text in raw_of(LIVE / "h200x2").items():
        (root / name).write_text(text)
    for name in ("query-gpu.csv", "docker-info.json", "nvml.json"):
        (root / name).write_text(_payloads()["bigint"])
    code, out, err = run_cli(["preflight", str(LIVE / "spec.yaml"), "--replay",
                              str(tmp_path / "rec")], capsys)
    assert code in (0, 1), err
    assert "Traceback" not in err
