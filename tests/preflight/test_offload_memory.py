"""preflight's host-memory check for engine.kvOffload (issue 37 item 3.3): the host's
MemAvailable (/proc/meminfo) against the offload tiers of the engines it holds, plus a margin.

vLLM allocates each engine's tier at start as pinned host memory (`torch.zeros(...,
pin_memory=True)` in vllm/v1/kv_offload/cpu/gpu_worker.py, 0.23.0 l.485-510), so a host without
the room fails at start. The GPU facts are the recorded H200 host (tests/fixtures/gpu/h200x2);
that recording has no /proc/meminfo, so each case adds its MemAvailable line here.

Spec: two replicas of TP 1 on the host, engine.kvOffload.sizeGib 16 -> 32 GiB of tiers on it;
margin max(4 GiB, 10% of 32) = 4 -> want >= 36 GiB available.
"""

from __future__ import annotations

from pdctl.plan import make_plan
from pdctl.preflight import host
from pdctl.spec import load_text
from tests.preflight.conftest import FIX, by_check, findings, raw_of

SPEC = (
    "name: t\nphase: 0\nmodel: {name: meta-llama/Llama-3.1-8B-Instruct, maxModelLen: 8192}\n"
    "engine: {version: '0.33.0', kvOffload: {sizeGib: 16, backend: native}}\nhosts:\n"
    "  - {name: g, address: 10.0.0.1, gpus: [0, 1], runtime: venv, venv: /opt/v}\n"
    "serve: {replicas: 2, tensorParallel: 1}\n"
)


def _meminfo(available_gib: float) -> str:
    return (
        "MemTotal:       2113510644 kB\n"
        f"MemAvailable:   {int(available_gib * 1024**2)} kB\n"
    )


def _finding(available_gib: float | None):
    raw = raw_of(FIX / "h200x2")
    if available_gib is not None:
        raw[host.MEMINFO] = _meminfo(available_gib)
    (found,) = by_check(findings(SPEC, {"g": raw}), "host.memory")
    return found


def test_enough_host_memory_passes() -> None:
    found = _finding(100)
    assert found.status == "PASS"
    assert found.found == "MemAvailable 100.0 GiB"
    assert found.expected.startswith(">= 36.0 GiB available: 32.0 GiB of KV offload tiers")


def test_within_the_margin_warns() -> None:
    """34 GiB: the 32 GiB tiers fit, the 4 GiB margin does not -> WARN; the fix's size:
    (34 - max(4, 3.4)) x 16 / 32 = 15."""
    found = _finding(34)
    assert found.status == "WARN"
    assert "lower engine.kvOffload.sizeGib to 15 or less" in found.fix


def test_short_of_the_tiers_fails() -> None:
    """20 GiB < 32 GiB of tiers -> FAIL; fix (20 - 4) x 16 / 32 = 8."""
    found = _finding(20)
    assert found.status == "FAIL"
    assert "lower engine.kvOffload.sizeGib to 8 or less" in found.fix


def test_not_gathered_warns() -> None:
    found = _finding(None)
    assert found.status == "WARN"
    assert "not gathered" in found.found


def test_meminfo_gathered_only_with_offload() -> None:
    spec, _ = load_text(SPEC, "spec.yaml")
    h = make_plan(spec).spec.hosts[0]
    assert host.MEMINFO in host.commands(spec, h)
    plain, _ = load_text(SPEC.replace(", kvOffload: {sizeGib: 16, backend: native}", ""), "s.yaml")
    assert host.MEMINFO not in host.commands(plain, plain.hosts[0])
    assert not by_check(findings(SPEC.replace(", kvOffload: {sizeGib: 16, backend: native}", ""),
                                 {"g": raw_of(FIX / "h200x2")}), "host.memory")


def test_parse_meminfo() -> None:
    assert host.parse_meminfo(_meminfo(1)) == 1024**2
    assert host.parse_meminfo("MemTotal: 10 kB\n") is None
