"""`up` on Kubernetes prunes only after the new objects rolled out: switching phase 2 -> 1
whose new Deployment never becomes ready keeps the phase 2 Deployments (and says so in the
error line); once the rollout succeeds, the next `up` prunes them. Against kmock, which has no
controller: a rollout is made to succeed by writing the Deployment's status as the controller
would."""

from __future__ import annotations

import pytest

from pdctl.errors import PdctlError
from tests.targets.kube.examples import roll_out
from tests.targets.kube.test_kinds import plan_objects, spec_data, target


def test_a_failed_rollout_keeps_what_prune_would_delete(cluster) -> None:
    data = spec_data("phase2-llmd", name="korder", serve={"replicas": 1, "tensorParallel": 1})
    plan, phase2 = plan_objects(data)
    _, phase1 = plan_objects(data, phase=1)
    tgt = target(cluster, plan)
    tgt.apply_objects(phase2)
    old = {o["metadata"]["name"] for o in phase2 if o["kind"] == "Deployment"}
    new = {o["metadata"]["name"] for o in phase1 if o["kind"] == "Deployment"}
    assert old - new
    try:
        tgt.objects = phase1
        with pytest.raises(PdctlError) as failed:
            tgt.apply(tgt.changes(), {}, timeout=0.2)
        line = str(failed.value)
        assert "not rolled out" in line and "kept" in line and "pdctl up" in line, line
        for name in old - new:
            assert tgt.get("Deployment", name) is not None, name
            assert f"Deployment/{name}" in line
        for name in new:
            roll_out(tgt, name)
        tgt.apply(tgt.changes(), {}, timeout=5)
        for name in old - new:
            assert tgt.get("Deployment", name) is None, name
        assert {k for a, k, _ in tgt.object_changes(phase1) if a == "prune"} == set()
    finally:
        tgt.delete_objects(volumes=True)
