"""Helpers for preflight tests: fixture folders, specs, replays through the real CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from pdctl.plan import make_plan
from pdctl.preflight import record
from pdctl.preflight.facts import Facts
from pdctl.preflight.finding import Finding
from pdctl.preflight.registry import facts_from, run_checks
from pdctl.spec import load_text
from tests.conftest import ROOT
from tests.helpers import pdctl  # noqa: F401 - the preflight tests import it from here

FIX = ROOT / "tests" / "fixtures" / "gpu"


def raw_of(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir()) if p.is_file()}


def spec_text(hosts: str, serve: str = "{replicas: 1, tensorParallel: 2}", extra: str = "",
              model: str = "meta-llama/Llama-3.1-8B-Instruct") -> str:
    return (f"name: t\nphase: 0\nmodel: {{name: {model}, maxModelLen: 8192}}\n"
            f"engine: {{version: '0.33.0'}}\nhosts:\n{hosts}\nserve: {serve}\n{extra}")


def findings(text: str, raw: dict[str, dict[str, str]] | Facts) -> tuple[Finding, ...]:
    """The findings of spec `text` over raw outputs per host (or facts)."""
    spec, _ = load_text(text, "spec.yaml")
    return run_checks(make_plan(spec), raw if isinstance(raw, Facts) else facts_from(raw))


def by_check(found: tuple[Finding, ...], check: str) -> list[Finding]:
    return [f for f in found if f.check == check]


def replay_dir(tmp: Path, hosts: dict[str, Path]) -> Path:
    """A replay folder with one folder per host, copied from fixture folders."""
    root = tmp / "replay"
    record.write(root, {name: raw_of(src) for name, src in hosts.items()})
    return root


def json_findings(proc: subprocess.CompletedProcess[str]) -> list[dict[str, str]]:
    return json.loads(proc.stdout)["findings"]


@pytest.fixture
def fix() -> Path:
    return FIX
