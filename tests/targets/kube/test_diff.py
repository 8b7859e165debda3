"""`pdctl diff` and `up --dry-run` on Kubernetes: a server-side dry run (dryRun=All).

Checked only against kmock: kmock 0.8 ignores dryRun (first test), so the dry-run answers
here come from tests/targets/kmock_dry.py, which stores nothing on a dry run and answers
with kmock's plain merge of the object (no field ownership, defaulting or admission as a
real API server has). What these tests prove is pdctl's side: only dry runs and reads reach
the server, the diff of live against the answer, prune candidates, exit codes; and that a
server ignoring dryRun is refused, net unchanged.
"""

from __future__ import annotations

import base64
import copy

import pytest
from kubernetes import client

from pdctl.errors import PdctlError
from pdctl.targets.kube.diff import PROBE, clean
from pdctl.targets.kube.target import KubeTarget
from tests.helpers import checked
from tests.targets.conftest import builtin_resources, kube_server
from tests.targets.kmock_dry import dry_run_server, writes
from tests.targets.kube.test_target import phase1, write_kube_files
from tests.targets.testbed import pdctl

NS = "vllm-inference"


@pytest.fixture
def dry(monkeypatch):
    with dry_run_server(builtin_resources(), monkeypatch) as (srv, calls):
        yield srv, calls


def target(url: str, name: str) -> KubeTarget:
    return KubeTarget(client.ApiClient(client.Configuration(host=url)), name, NS)


def kube_files(url: str, tmp_path, name: str) -> tuple:
    """The phase 1 example with one replica (what phase1() renders) and a kubeconfig."""
    return write_kube_files(url, tmp_path, name, replicas=1)


def stored(srv) -> list:
    return sorted(str(k) for k, o in srv.emulator.objects.items() if not o.deleted)


def test_kmock_ignores_dry_run_and_the_dry_run_refuses_it():
    with kube_server(builtin_resources()) as srv:
        tgt = target(srv.url, "kstock")
        cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {}}
        path = f"/api/v1/namespaces/{NS}/configmaps"
        tgt._call("POST", path, cm, [("dryRun", "All")])
        assert tgt._call("GET", f"{path}/c") is not None  # kmock stored a dry-run create
        tgt._call("DELETE", f"{path}/c")
        plan, objs = phase1("kstock")
        tgt.objects = objs
        before = stored(srv)
        with pytest.raises(PdctlError, match="ignores dryRun=All"):
            tgt.preview()
        assert stored(srv) == before  # the probe it stored was deleted; nothing else sent
        assert not [p for m, p in srv.log if m == "PATCH"]


def test_dry_run_of_a_new_deployment_creates_nothing(dry):
    srv, calls = dry
    plan, objs = phase1("kdry")
    tgt = target(srv.url, "kdry")
    tgt.objects = objs
    found = tgt.preview()
    assert {(d.kind, d.action) for d in found} == {
        ("Deployment", "create"), ("Service", "create"), ("PersistentVolumeClaim", "create"),
    }
    dep = next(d for d in found if d.kind == "Deployment")
    assert dep.text.startswith("--- live/apps.v1.Deployment.vllm-inference.kdry-serve\n")
    assert "+  name: kdry-serve\n" in dep.text and "pdctl.io/hash" in dep.text
    assert writes(calls) == [] and stored(srv) == []
    dry_runs = {p for m, p, q in calls if q.get("dryRun") == "All"}
    assert f"/apis/apps/v1/namespaces/{NS}/deployments/kdry-serve" in dry_runs
    assert tgt.diff()[0][0].why == "create"


def test_diff_after_apply_shows_only_the_change_and_what_prune_deletes(dry):
    srv, calls = dry
    _, objs = phase1("kdiff")
    tgt = target(srv.url, "kdiff")
    tgt.apply_objects(objs)
    tgt.objects = objs
    assert {d.action for d in tgt.preview()} == {"unchanged"}
    changed = copy.deepcopy([o for o in objs if o["kind"] != "Service"])  # Service: pruned
    next(o for o in changed if o["kind"] == "Deployment")["spec"]["replicas"] = 3
    tgt.objects = changed
    del calls[:]
    found = {d.kind: d for d in tgt.preview()}
    assert found["Deployment"].action == "update"
    assert "-  replicas: 1\n+  replicas: 3\n" in found["Deployment"].text
    assert found["PersistentVolumeClaim"].action == "unchanged"
    assert found["Service"].action == "prune"
    assert found["Service"].text.startswith("--- live/v1.Service.vllm-inference.kdiff\n")
    assert writes(calls) == []
    assert tgt.get("Deployment", "kdiff-serve")["spec"]["replicas"] == 1
    assert tgt.get("Service", "kdiff") is not None


def test_clean_drops_what_the_server_owns():
    meta = {"name": "a", "uid": "u", "resourceVersion": "7", "generation": 2}
    meta.update(creationTimestamp="t", managedFields=[{}], labels={"l": "1"})
    live = {"kind": "X", "metadata": meta, "spec": {"s": 1}, "status": {"ready": 1}}
    want = {"kind": "X", "metadata": {"name": "a", "labels": {"l": "1"}}, "spec": {"s": 1}}
    assert clean(live) == want


def test_cli_diff_exit_codes_and_up_dry_run(dry, tmp_path):
    srv, calls = dry
    spec, kubeconfig = kube_files(srv.url, tmp_path, "kcli")
    kc = ("--kubeconfig", str(kubeconfig))
    first = checked(pdctl("diff", str(spec), *kc), 1)
    assert "create    Deployment/kcli-serve\n" in first.stdout
    assert "+++ merged/apps.v1.Deployment.vllm-inference.kcli-serve" in first.stdout
    assert first.stdout.endswith("3 create\n")
    del calls[:]
    up_dry = checked(pdctl("up", str(spec), "--dry-run", *kc))
    assert "create   Deployment/kcli-serve" in up_dry.stdout
    asked = [(m, p) for m, p, q in calls if q.get("dryRun") == "All"]  # the server's dry run
    assert ("PATCH", f"/apis/apps/v1/namespaces/{NS}/deployments/kcli-serve") in asked
    assert writes(calls) == [] and stored(srv) == []
    _, objs = phase1("kcli")
    target(srv.url, "kcli").apply_objects(objs)
    same = checked(pdctl("diff", str(spec), *kc))
    assert same.stdout == "3 unchanged\nno changes\n"
    gone = pdctl("diff", str(spec), "--kubeconfig", str(tmp_path / "missing"))
    missing = f"error: kubeconfig file {tmp_path / 'missing'} does not exist; check --kubeconfig"
    assert gone.returncode == 2 and gone.stderr.startswith(missing), gone.stderr


def test_cli_diff_refuses_a_server_that_ignores_dry_run(tmp_path):
    with kube_server(builtin_resources()) as srv:
        spec, kubeconfig = kube_files(srv.url, tmp_path, "kign")
        before = stored(srv)
        out = checked(pdctl("diff", str(spec), "--kubeconfig", str(kubeconfig)), 2)
        assert "ignores dryRun=All" in out.stderr and len(out.stderr.splitlines()) == 1
        assert stored(srv) == before
        assert PROBE not in str(before)


def test_the_probe_is_skipped_when_configmaps_are_forbidden(dry):
    srv, calls = dry
    srv.emulator[f"get /api/v1/namespaces/{NS}/configmaps/{PROBE}"] << 403  # RBAC says no
    _, objs = phase1("kforbid")
    tgt = target(srv.url, "kforbid")
    tgt.objects = objs
    assert {d.action for d in tgt.preview()} == {"create"}
    assert not [p for m, p, q in calls if m == "POST" and PROBE in str(q) + p]
    assert writes(calls) == [] and stored(srv) == []


# `pdctl diff` never prints a Secret's values: `data` and `stringData` are masked as
# `kubectl diff` masks them (`***`, or `*** (before)` / `*** (after)` for a changed value), keys
# kept; for a Secret pdctl would update and for one it would prune. On kmock honouring dryRun
# (tests/targets/kmock_dry.py).
OLD = "b2xkLXNlY3JldC12YWx1ZQ"  # every value below starts with one of these prefixes
NEW = "bmV3LXNlY3JldC12YWx1ZQ"
PLAIN = "plain-text-secret-value"


def secret(name: str, token: str, same: str) -> dict:
    instance = name.rsplit("-", 1)[0]
    labels = {"app.kubernetes.io/instance": instance, "app.kubernetes.io/managed-by": "pdctl"}
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "data": {"token": base64.b64encode(token.encode()).decode(), "same": same},
        "stringData": {"note": PLAIN + token[:3]},
    }


def leaks(text: str) -> list[str]:
    return [v for v in (OLD, NEW, PLAIN, "old-secret", "new-secret") if v in text]


def test_an_updated_secret_is_masked_keys_kept(dry):
    srv, _ = dry
    _, objs = phase1("ksec")
    before = secret("ksec-token", "old-secret-value", OLD + "same")
    tgt = target(srv.url, "ksec")
    tgt.apply_objects([*objs, before])
    after = copy.deepcopy(before)
    after["data"]["token"] = base64.b64encode(b"new-secret-value").decode()
    after["stringData"]["note"] = PLAIN + "new"
    tgt.objects = [*objs, after]
    found = {d.kind: d for d in tgt.preview()}
    text = found["Secret"].text
    assert found["Secret"].action == "update", text
    assert leaks(text) == [], text
    assert "-  token: '*** (before)'\n+  token: '*** (after)'\n" in text, text
    assert "   same: '***'\n" in text, text  # unchanged value: masked, key kept
    assert "-  note: '*** (before)'\n+  note: '*** (after)'\n" in text, text
    tgt.delete_objects(volumes=True)


def test_a_pruned_secret_is_masked_in_the_cli_diff(dry, tmp_path):
    srv, _ = dry
    _, objs = phase1("kcsec")
    target(srv.url, "kcsec").apply_objects([*objs, secret("kcsec-token", "old-secret", OLD)])
    spec, kubeconfig = kube_files(srv.url, tmp_path, "kcsec")
    out = checked(pdctl("diff", str(spec), "--kubeconfig", str(kubeconfig)), 1)
    assert "prune     Secret/kcsec-token\n" in out.stdout, out.stdout
    assert leaks(out.stdout) == [], out.stdout
    assert "-  token: '***'\n" in out.stdout and "-  same: '***'\n" in out.stdout, out.stdout
    assert "-  note: '***'\n" in out.stdout, out.stdout
