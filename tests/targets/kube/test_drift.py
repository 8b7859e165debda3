"""A live object edited outside pdctl (`kubectl scale`, `kubectl edit`) is an `update` for
`up` as for `diff`: `up` lists it and asks before putting it back; and an `up` with nothing to
change writes nothing to the cluster. Against kmock (conftest.py)."""

from __future__ import annotations

from tests.helpers import checked, pdctl
from tests.targets.kube.examples import roll_out
from tests.targets.kube.test_kinds import plan_objects, spec_data, target, write_files


def scale(tgt, name: str, replicas: int) -> None:  # type: ignore[no-untyped-def]
    path = tgt._path("Deployment", name)
    body = {"spec": {"replicas": replicas}}
    tgt._call("PATCH", path, body, content_type="application/merge-patch+json")


def test_a_drifted_object_is_an_update(cluster) -> None:
    plan, objs = plan_objects(spec_data("phase1-k8s", name="kdrift", serve={"replicas": 2}))
    tgt = target(cluster, plan)
    tgt.apply_objects(objs)
    try:
        assert {a for a, _, _ in tgt.object_changes(objs)} == {"unchanged"}
        scale(tgt, "kdrift-serve", 5)
        changes = {(k, a) for a, k, _ in tgt.object_changes(objs)}
        assert ("Deployment", "update") in changes and ("Service", "unchanged") in changes
        labels = {"metadata": {"labels": {"app.kubernetes.io/component": "other"}}}
        path = tgt._path("Service", "kdrift")
        tgt._call("PATCH", path, labels, content_type="application/merge-patch+json")
        changes = {(k, a) for a, k, _ in tgt.object_changes(objs)}
        assert ("Service", "update") in changes
    finally:
        tgt.delete_objects(volumes=True)


def test_up_asks_before_undoing_a_drift_and_a_no_op_up_writes_nothing(cluster, tmp_path) -> None:
    data = spec_data("phase1-k8s", name="kdriftcli", serve={"replicas": 2})
    plan, objs = plan_objects(data)
    tgt = target(cluster, plan)
    tgt.apply_objects(objs)
    spec, kubeconfig = write_files(cluster, tmp_path, data)
    cmd = ["up", spec, "--timeout", "5", "--kubeconfig", kubeconfig]
    try:
        roll_out(tgt, "kdriftcli-serve")
        scale(tgt, "kdriftcli-serve", 5)
        no = pdctl(*cmd, input="n\n")
        assert "update   Deployment/kdriftcli-serve" in no.stdout, no.stdout + no.stderr
        assert "apply these changes?" in no.stdout, no.stdout
        assert tgt.get("Deployment", "kdriftcli-serve")["spec"]["replicas"] == 5
        yes = pdctl(*cmd, "--yes")
        assert tgt.get("Deployment", "kdriftcli-serve")["spec"]["replicas"] == 2
        roll_out(tgt, "kdriftcli-serve")
        start = len(cluster.log)
        same = checked(pdctl(*cmd))
        assert "nothing to change" in same.stdout, same.stdout
        written = [(m, p) for m, p in cluster.log[start:] if m != "GET"]
        assert written == [], written
        assert "applied Deployment" not in same.stdout, same.stdout
        assert yes.returncode == 0, yes.stdout + yes.stderr
    finally:
        tgt.delete_objects(volumes=True)


def test_up_and_diff_name_the_same_changes(monkeypatch) -> None:
    """On a kmock honouring dryRun (kmock_dry.py), `up`'s comparison and `diff`'s server-side
    dry run agree: after apply, after a scale, after a relabel and a foreign label added."""
    from tests.targets.conftest import builtin_resources
    from tests.targets.kmock_dry import dry_run_server

    with dry_run_server(builtin_resources(), monkeypatch) as (srv, _calls):
        plan, objs = plan_objects(spec_data("phase1-k8s", name="kagree", serve={"replicas": 2}))
        tgt = target(srv, plan)
        tgt.objects = objs
        tgt.apply_objects(objs)

        def both() -> tuple[set, set]:
            up = {(a, k, n) for a, k, n in tgt.object_changes(objs)}
            diff = {(d.action, d.kind, d.name) for d in tgt.preview()}
            return up, diff

        up, diff = both()
        assert up == diff and {a for a, _, _ in up} == {"unchanged"}
        scale(tgt, "kagree-serve", 5)
        up, diff = both()
        assert up == diff and ("update", "Deployment", "kagree-serve") in up
        labels = {**tgt.get("Service", "kagree")["metadata"]["labels"], "oncall": "search"}
        path = tgt._path("Service", "kagree")  # a label pdctl does not send, pdctl's kept:
        patch = {"metadata": {"labels": labels}}
        tgt._call("PATCH", path, patch, content_type="application/merge-patch+json")
        assert tgt.get("Service", "kagree")["metadata"]["labels"]["oncall"] == "search"
        up, diff = both()
        assert up == diff and ("unchanged", "Service", "kagree") in up, (up, diff)
