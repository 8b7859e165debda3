"""tune's rules: a saturated role next to an idle one moves an instance (P:D ratio), a full KV
cache with preemptions doubles TP, a binding batch cap doubles max-num-seqs, phase 3 slices
move with decode's KV; the overlay is what `--overlay` merges. The recorded report
(data/unbalanced-pd.json) is a real `pdctl bench -o json` of the CPU build: NIXL P/D with a
decode capped at --max-num-seqs 2 under 8 concurrent requests."""

from __future__ import annotations

import json
from pathlib import Path

from pdctl.bench.tune import notes, overlay, propose

DATA = Path(__file__).parent / "data"


def instance(role: str, waiting=0.0, running=0.0, kv=0.0, cap=None, preemptions=0.0) -> dict:
    return {"name": f"x-{role}-0", "role": role, "max_num_seqs": cap, "preemptions": preemptions,
            "peak": {"waiting": waiting, "running": running, "kv_usage": kv}}


def report(*rows: dict, ttft=None, tpot=None, slo=None) -> dict:
    return {
        "workload": slo or {},
        "steps": [{
            "load": "concurrency 64",
            "measured": {"outputThroughput": 100.0, "ttftMs": {"p90": ttft},
                         "tpotMs": {"p90": tpot}, "itlMs": {}},
            "ratio": {"outputThroughput": 0.2},
            "metrics": {"instances": list(rows)},
        }],
    }


PD = {"phase": 2, "prefill": {"replicas": 1}, "decode": {"replicas": 3}}


def test_prefill_queueing_while_decode_idles_moves_a_decode_instance_to_prefill():
    r = report(instance("prefill", waiting=12, running=8, cap=8),
               instance("decode", running=4, kv=0.1))
    found = {".".join(p.path): p for p in propose(PD, r)}
    assert (found["decode.replicas"].value, found["prefill.replicas"].value) == (2, 2)
    why = found["decode.replicas"].evidence
    assert "prefill queued up to 12 requests while decode idled" in why
    assert overlay(list(found.values())) == {"decode": {"replicas": 2}, "prefill": {"replicas": 2}}


def test_decode_kv_full_with_preemptions_adds_decode_and_doubles_tp():
    r = report(instance("prefill", running=200), instance("decode", kv=0.97, preemptions=5))
    found = {".".join(p.path): p.value for p in propose(PD, r)}
    assert found == {"decode.replicas": 4, "decode.tensorParallel": 2}


def test_a_binding_batch_cap_with_kv_to_spare_doubles_max_num_seqs():
    spec = {"phase": 0, "serve": {"replicas": 1, "maxNumSeqs": 16}}
    r = report(instance("serve", waiting=30, running=16, kv=0.2, cap=16))
    found = {".".join(p.path): p.value for p in propose(spec, r)}
    assert found == {"serve.replicas": 2, "serve.maxNumSeqs": 32}


def test_a_balanced_deployment_gets_no_proposal_and_plan_misses_are_noted():
    r = report(instance("prefill", running=100), instance("decode", running=100, kv=0.5))
    assert propose(PD, r) == []
    assert notes(r) == ["outputThroughput: measured 0.2x what `pdctl plan` predicted "
                        "(concurrency 64)"]


def test_phase3_idle_slices_pack_one_more_per_gpu_and_full_ones_one_fewer():
    spec = {"phase": 3, "prefill": {"replicas": 1}, "decode": {"replicas": 4,
                                                            "share": {"perGpu": 2}}}
    idle = report(instance("prefill", running=100), instance("decode", running=2, kv=0.1))
    assert overlay(propose(spec, idle)) == {"decode": {"share": {"perGpu": 3}}}
    full = report(instance("prefill", running=100), instance("decode", kv=0.95, preemptions=2))
    assert overlay(propose(spec, full))["decode"]["share"] == {"perGpu": 1}


def test_the_recorded_unbalanced_pd_run_proposes_more_decode():
    recorded = json.loads((DATA / "unbalanced-pd.json").read_text())
    spec = {"phase": 2, "prefill": {"replicas": 1}, "decode": {"replicas": 1, "maxNumSeqs": 2}}
    found = {".".join(p.path): p for p in propose(spec, recorded)}
    assert found["decode.replicas"].value == 2, found
    assert "decode queued up to" in found["decode.replicas"].evidence
    assert found["decode.maxNumSeqs"].value == 4
    assert "prefill idled but has a single instance" in found["decode.replicas"].evidence
    # TTFT missed its SLO, but behind decode's queue: never more prefill
    assert "prefill.replicas" not in found
