"""Defaults that work (issue 40): `router: {}` beside the engines on one host, and the
warning a phase-0 spec with several replicas and no router gets at validate and up."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers import checked, pdctl, written

SPEC = """\
name: demo
model:
  name: meta-llama/Llama-3.1-8B-Instruct
hosts:
  - name: gpu-a
    address: 192.0.2.10
    gpus: [0, 1]
serve:
  replicas: {replicas}
{router}"""

URLS = "http://192.0.2.10:8000/v1, http://192.0.2.10:8001/v1"


def _spec(tmp_path: Path, replicas: int = 2, router: str = "") -> str:
    path = written(tmp_path / "spec.yaml", SPEC.format(replicas=replicas, router=router))
    return str(path)


def test_router_with_every_default_runs_beside_the_engines(tmp_path: Path) -> None:
    """Before: router.port defaulted to 8000, the first engine's port on the same host, so
    `router: {}` (documented as "every default") failed validation (exit 2)."""
    proc = checked(pdctl("validate", _spec(tmp_path, router="router: {}\n")))
    assert "demo-router   on gpu-a  GPUs -  port 8090" in proc.stdout
    assert "demo-serve-0  on gpu-a  GPUs 0  port 8000" in proc.stdout
    assert "warning" not in proc.stderr  # a router: one endpoint, no hint


def test_validate_says_clients_get_n_endpoints_and_how_to_get_one(tmp_path: Path) -> None:
    """Before: no word about it; the clients had to find out they get one URL per replica."""
    spec = _spec(tmp_path)
    proc = checked(pdctl("validate", spec))  # a warning, not an error
    line = f"{spec}: warning: serve: clients get 2 endpoints, one per replica"
    assert line in proc.stderr and URLS in proc.stderr
    assert "add `router: {}`" in proc.stderr
    doc = json.loads(pdctl("validate", spec, "-o", "json").stdout)
    assert any("clients get 2 endpoints" in w for w in doc["warnings"])


def test_up_says_it_too_and_keeps_json_clean(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    proc = checked(pdctl("up", spec, "--dry-run", "--offline"))
    assert "clients get 2 endpoints" in proc.stderr and URLS in proc.stderr
    proc = checked(pdctl("up", spec, "--dry-run", "--offline", "-o", "json"))
    json.loads(proc.stdout)  # the warning is on stderr only
    assert "clients get 2 endpoints" in proc.stderr


def test_one_replica_gets_no_hint(tmp_path: Path) -> None:
    proc = checked(pdctl("validate", _spec(tmp_path, replicas=1)))
    assert "endpoints" not in proc.stderr
