"""`pdctl autoscale` on hosts, the pure parts: the rules from the plan's targets, one window of
the engines' figures -> the policy's inputs, the decisions -> the scale steps, the evidence
lines, the systemd unit; and the CLI's refusals before anything connects."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from pdctl.autoscale.live import Seen, evidence, line, observed, rules, steps, unit_text
from pdctl.autoscale.policy import Decision, RoleRule, decide
from pdctl.cli.options import seconds_of
from pdctl.plan import make_plan
from pdctl.plan.autoscale import targets
from pdctl.spec import load_text
from tests.conftest import ROOT
from tests.helpers import cli

HOST = {"name": "a", "address": "192.0.2.30", "gpus": [0, 1, 2], "runtime": "venv", "venv": "/v"}
SCALING = {"serve": {"minReplicas": 1, "maxReplicas": 3, "target": 2, "scaleDownS": 60}}


def doc(**scaling: object) -> dict:
    return {
        "name": "sc", "phase": 0, "model": {"name": "m/m"}, "hosts": [HOST],
        "serve": {"replicas": 2, "port": 8000, "maxNumSeqs": 4}, "router": {"port": 8080},
        "autoscaling": scaling or SCALING,
    }


def serve_rules() -> tuple[RoleRule, ...]:
    plan = make_plan(load_text(yaml.safe_dump(doc()))[0])
    return rules(targets(plan, None))


def test_the_rules_are_the_spec_bounds_and_the_target():
    (rule,) = serve_rules()
    assert rule == RoleRule("serve", "waiting", 2.0, 1, 3, 1, 30.0, 60.0)


def test_a_window_becomes_the_metric_summed_and_the_busy_instances():
    engines = [
        Seen("serve", waiting=3, running=4, kv_usage=0.5, request_rate=1.0, max_num_seqs=4),
        Seen("serve", waiting=1, running=2, kv_usage=0.25, request_rate=0.5, max_num_seqs=4),
        Seen("serve", error="/metrics: no answer"),
        Seen("router", waiting=9),
    ]
    sums, busy, seen = observed(serve_rules(), engines)
    assert sums == {"serve": 4.0} and busy == {"serve": 1.5}
    assert seen["serve"] == {"answered": 2, "silent": 1, "waiting": 4.0, "running": 6.0,
                             "kv_usage": 0.75, "request_rate": 1.5, "busy": 1.5}
    kv = (RoleRule("serve", "kvUsage", 0.5, 1, 3, 1),)
    assert observed(kv, engines)[0] == {"serve": 0.75}  # KV usage: summed over instances


def test_waiting_requests_decide_a_scale_up_that_becomes_a_step():
    engines = [Seen("serve", waiting=6, running=4, max_num_seqs=4)] * 2
    sums, busy, seen = observed(serve_rules(), engines)
    (d,) = decide(serve_rules(), sums, {"serve": 2}, {}, 1000.0, busy=busy)
    assert (d.current, d.replicas) == (2, 3)  # 6 waiting per instance vs 2: maxReplicas 3
    assert steps([d]) == [d]
    doc = evidence(d, seen["serve"], "2026-12-05T23:00:00Z")
    assert doc["action"] == "up" and doc["observed"]["waiting"] == 12
    assert line(doc) == (
        "2026-12-05T23:00:00Z serve 2 -> 3 (up): waiting 6/instance vs target 2: over by 200%, "
        "scale up | waiting 12, running 8, busy 2.00, 2 answered"
    )
    json.dumps(doc)  # -o json: one object a line


def test_an_idle_role_scales_down_after_its_cooldown_and_holds_before():
    engines = [Seen("serve", waiting=0, running=0, max_num_seqs=4)] * 2
    sums, busy, _ = observed(serve_rules(), engines)
    (held,) = decide(serve_rules(), sums, {"serve": 2}, {"serve": 970.0}, 1000.0, busy=busy)
    assert not held.changed and "waits: 30 s since the last action < scaleDownS 60" in held.reason
    assert steps([held]) == []
    (d,) = decide(serve_rules(), sums, {"serve": 2}, {"serve": 900.0}, 1000.0, busy=busy)
    assert (d.replicas, evidence(d, {}, "t")["action"]) == (1, "down")


def test_scale_downs_go_first():
    up, down = Decision("decode", 3, 2, ""), Decision("prefill", 1, 2, "")
    assert steps([up, Decision("x", 1, 1, ""), down]) == [down, up]


def test_the_unit_restarts_always_and_quotes_each_argument():
    text = unit_text("sc", ["/usr/bin/python3", "-m", "pdctl", "autoscale", "/s/my spec.yaml",
                            "--interval", "50%"], "/home/op")
    assert "Restart=always" in text and "WorkingDirectory=/home/op" in text
    command = "/usr/bin/python3 -m pdctl autoscale '/s/my spec.yaml' --interval '50%%'"
    assert f"ExecStart={command}\n" in text


def write(tmp_path: Path, data: dict) -> str:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_the_cli_refuses_in_one_line_before_connecting(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    no_section = doc()
    del no_section["autoscaling"]
    _, err = cli(["autoscale", write(tmp_path, no_section), "--once"], code=2)
    assert "autoscaling: the spec has no autoscaling section" in " ".join(err.split()), err
    _, err = cli(["autoscale", "examples/phase2-k8s-autoscale.yaml", "--once"], code=2)
    assert "pdctl scale works on SSH hosts" in " ".join(err.split()), err
    assert "Traceback" not in err


def test_unit_prints_the_supervised_command(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = write(tmp_path, doc())
    out, _ = cli(["autoscale", "spec.yaml", "--interval", "60", "--unit"])
    assert "Restart=always" in out and f"autoscale {spec} --interval 60\n" in out, out


def test_window_and_interval_are_durations_as_tops_window(tmp_path: Path):
    """`--window 20s`, `--interval 5m` as `pdctl top --window` takes them; a plain number is
    seconds (what the option took before); out of range or not a duration: one line, exit 2,
    before the spec is read."""
    assert (seconds_of("20s", "--window"), seconds_of("10", "--window")) == (20.0, 10.0)
    assert seconds_of("5m", "--interval", 86400) == 300.0
    missing = str(tmp_path / "none.yaml")
    _, err = cli(["autoscale", missing, "--window", "0s"], 2)
    assert "--window: expected a duration from 1s to 1h such as 60s or 2m (got '0s')" in err
    _, err = cli(["autoscale", missing, "--interval", "2d"], 2)
    assert "--interval: expected a duration from 1s to 24h" in err
