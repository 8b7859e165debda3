"""The bench and tune commands where no deployment is needed: `up --verify` refused before
anything starts outside P/D on hosts, `--compare` refusing different engine flags with exit 2,
and tune writing an overlay that `--overlay` takes, with the rendered difference."""

from __future__ import annotations

import json

import yaml

from tests.conftest import ROOT
from tests.helpers import checked, written
from tests.targets.testbed import pdctl

NIXL = str(ROOT / "examples" / "phase2-nixl-hosts.yaml")


def run_report(flags: dict, waiting: float = 0.0) -> dict:
    return {
        "kind": "pdctl-bench", "specHash": "0", "workload": {},
        "engines": [{"role": "decode", "flags": flags, "version": "0.33.0"}],
        "steps": [{
            "load": "concurrency 8",
            "measured": {"outputThroughput": 50.0, "ttftMs": {"p50": 10.0}, "tpotMs": {},
                         "itlMs": {}},
            "metrics": {"instances": [
                {"name": "p", "role": "prefill", "peak": {"running": 1}, "max_num_seqs": 256},
                {"name": "d", "role": "decode", "max_num_seqs": 256,
                 "peak": {"waiting": waiting, "running": 256, "kv_usage": 0.5}},
            ]},
        }],
    }


def test_up_verify_is_refused_on_phase0_before_connecting():
    res = checked(pdctl("up", str(ROOT / "examples" / "phase0-conda.yaml"), "--verify", "--yes"), 2)
    assert "--verify runs the P/D canary: phases 2 and 3 on SSH hosts" in res.stderr


def test_compare_refuses_a_flag_difference_and_names_it(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(run_report({"--enforce-eager": ""})))
    b.write_text(json.dumps(run_report({})))
    res = checked(pdctl("bench", "--compare", str(a), str(b)), 2)
    assert "decode: --enforce-eager only in A" in res.stderr
    assert "--allow-flag-diff" in res.stderr
    ok = pdctl("bench", "--compare", str(a), str(b), "--allow-flag-diff", "-o", "json")
    assert ok.returncode == 0 and json.loads(ok.stdout)["flagDifferences"]


def test_compare_refuses_a_file_that_is_not_a_report(tmp_path):
    other = written(tmp_path / "x.json", "{}")
    res = pdctl("bench", "--compare", str(other), str(other))
    assert res.returncode == 2 and "not a pdctl bench report" in res.stderr


def test_tune_writes_an_overlay_that_renders_more_decode(tmp_path):
    report = written(tmp_path / "run.json", json.dumps(run_report({}, waiting=9)))
    spec = yaml.safe_load(open(NIXL))
    spec["hosts"][0]["gpus"] = [0, 1, 2]  # room for the proposed decode
    path = written(tmp_path / "spec.yaml", yaml.safe_dump(spec))
    out = tmp_path / "tune.yaml"
    res = checked(pdctl("tune", str(path), "--from", str(report), "-w", str(out), "-o", "json"))
    doc = json.loads(res.stdout)
    assert yaml.safe_load(out.read_text()) == doc["overlay"] == {"decode": {"replicas": 2}}
    assert doc["doesNotPlan"] is None
    assert any("qwen-nixl-decode-1" in line for line in doc["diff"] if line.startswith("+"))
    rendered = pdctl("render", str(path), "--overlay", str(out))
    assert rendered.returncode == 0 and "qwen-nixl-decode-1" in rendered.stdout


def test_tune_says_when_its_proposal_needs_more_than_the_hosts_have(tmp_path):
    report = written(tmp_path / "run.json", json.dumps(run_report({}, waiting=9)))
    res = checked(pdctl("tune", NIXL, "--from", str(report)))
    assert "decode.replicas: 1 -> 2" in res.stdout
    assert "does not plan yet" in res.stdout and "free GPU" in res.stdout
