"""The H200 `bench` scenario of tests/gpu/drive.py, checked here as far as it goes without a
GPU: its spec validates, `pdctl plan` predicts every figure the report compares with, and the
driver offers the scenario. The run itself is the lead's (tests/gpu/README.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from pdctl.bench.report import capacity
from tests.gpu import drive
from tests.helpers import checked, written
from tests.targets.testbed import pdctl

MODELS = Path(drive.__file__).parent / "models"


def test_the_bench_scenario_spec_validates_and_the_plan_predicts_its_figures(tmp_path, monkeypatch):
    monkeypatch.setattr(drive, "MODELS", MODELS)
    spec = drive.bench_spec()
    assert spec["bench"]["concurrency"] and spec["workload"]["ttftMs"]
    path = written(tmp_path / "spec.yaml", yaml.safe_dump(spec, sort_keys=False))
    assert pdctl("validate", str(path)).returncode == 0
    planned = checked(pdctl("plan", str(path), "-o", "json"))
    cap = capacity(json.loads(planned.stdout))
    assert all(v is not None and v > 0 for v in cap.values()), cap


def test_the_driver_offers_the_bench_scenario(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["drive.py", "--help"])
    try:
        drive.main()
    except SystemExit:
        pass
    assert "bench" in capsys.readouterr().out
