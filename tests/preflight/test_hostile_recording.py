"""A damaged or hostile recording (`preflight --replay DIR`, or a host whose tools print
garbage) never crashes the parsers: every raw output file, replaced by hostile text, still gives
facts and findings. Generated payloads, not copied ones."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pdctl.plan import make_plan
from pdctl.preflight.facts import CLUSTER
from pdctl.preflight.registry import facts_from, run_checks
from pdctl.spec import load_text
from tests.preflight.conftest import FIX, raw_of

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
    from tests.helpers import run_cli

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
