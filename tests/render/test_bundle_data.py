"""The bundle as data: units with their files, Kubernetes objects as dicts (what targets and
checks read instead of parsing the rendered text back)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from pdctl.render import Bundle, render
from pdctl.render.bundle import Artifact, apply_rank, script_digest
from pdctl.targets.state import desired_units
from tests.helpers import bundle_of, plan_of

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.yaml"))


@pytest.mark.parametrize("name", EXAMPLES)
def test_objects_are_the_rendered_documents_in_apply_order(name):
    plan, bundle = bundle_of(ROOT / "examples" / name)
    yamls = [a for a in bundle if a.path.endswith(".yaml")]
    docs = [d for a in yamls for d in yaml.safe_load_all(a.text) if d]
    if plan.target != "kubernetes":
        assert bundle.objects == () and docs == []
        return
    assert list(bundle.objects) == sorted(docs, key=lambda o: apply_rank(o["kind"]))
    assert bundle.units == ()


@pytest.mark.parametrize("name", EXAMPLES)
def test_units_carry_their_files_and_digests(name):
    plan, bundle = bundle_of(ROOT / "examples" / name)
    if plan.target == "kubernetes":
        return
    unit_paths = [a.path for u in bundle.units for a in u.files]
    assert len(unit_paths) == len(set(unit_paths))
    for u in bundle.units:
        base = f"hosts/{u.unit.host.name}/{u.unit.name}/"
        assert u.start.path == base + "start.sh"
        assert all(a.path.startswith(base) for a in u.files)
        assert u.digest == script_digest(bundle[base + "start.sh"])
        assert f"pdctl-hash: {u.hash}" in u.start.text
    # every file under hosts/<host>/<unit>/ belongs to a unit; the others are loose (ports.md)
    loose = [a.path for a in bundle if a.path not in unit_paths]
    assert all(p.count("/") < 3 for p in loose)


def test_desired_units_read_data_not_script_headers():
    """A start script whose header names nothing (or lies) changes no unit's role or port:
    the role, port and address come from the plan's units."""
    plan, bundle = bundle_of(ROOT / "examples/phase2-mooncake-store.yaml")
    units = []
    for u in bundle.units:
        start = Artifact(u.start.path, "#!/bin/bash\n# edited\n", u.start.executable)
        units.append(replace(u, files=(start, *u.files[1:])))
    blank = Bundle("hosts", tuple(a for u in units for a in u.files), units=tuple(units))
    desired = {d.name: d for d in desired_units(plan, blank)}
    roles = {u.unit.name: u.unit.role for u in bundle.units}
    assert {n: d.role for n, d in desired.items()} == roles
    assert set(roles.values()) == {"master", "prefill", "decode", "router"}
    for d in desired.values():
        if d.role == "router":
            assert d.port == plan.spec.router.port and d.health_path == "/liveness"
        elif d.role == "master":
            assert d.port is None and d.health_path is None  # its RPC port answers no HTTP
        else:
            assert d.port == next(i.port for i in plan.instances if i.name == d.name)
            assert d.health_path == "/health"
    stages = [d.stage for d in desired_units(plan, blank)]
    assert stages[0] == 0 and stages[-1] == 2 and stages == sorted(stages)


def test_kubernetes_yaml_is_dumped_only_when_read(monkeypatch) -> None:
    """`up` applies a Kubernetes bundle's objects as data: render dumps no YAML until a file's
    text is read (render's stream), and then each document once."""
    import pdctl.render.kube as kube

    calls: list[str] = []
    real = kube.dump

    def counting(obj):
        calls.append(obj["kind"])
        return real(obj)

    monkeypatch.setattr(kube, "dump", counting)
    _, bundle = bundle_of(ROOT / "examples" / "phase1-k8s.yaml")
    assert calls == [] and bundle.objects
    first = bundle.stream()
    assert len(calls) == len(bundle.objects)
    assert bundle.stream() == first and len(calls) == len(bundle.objects)


def test_a_changed_replica_count_changes_the_routers_hash():
    """The router's start script runs a wrapper holding its --worker-urls: its hash covers them,
    so `up` after an edit of serve.replicas restarts it with the new list."""
    text = (ROOT / "examples/phase0-replicas-router.yaml").read_text()
    hashes = []
    for n in (3, 4):
        plan = plan_of(text.replace("replicas: 4", f"replicas: {n}"), "r.yaml")
        hashes.append(next(u.hash for u in render(plan).units
                           if u.unit.role == "router"))
    assert hashes[0] != hashes[1]
