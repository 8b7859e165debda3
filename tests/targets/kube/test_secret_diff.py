"""`pdctl diff` never prints a Secret's values: `data` and `stringData` are masked as
`kubectl diff` masks them (`***`, or `*** (before)` / `*** (after)` for a changed value), keys
kept; for a Secret pdctl would update and for one it would prune. On kmock honouring dryRun
(tests/targets/kmock_dry.py)."""

from __future__ import annotations

import base64
import copy

import pytest

from tests.targets.conftest import builtin_resources
from tests.targets.kmock_dry import dry_run_server
from tests.targets.kube.test_diff import NS, kube_files, target
from tests.targets.kube.test_target import phase1
from tests.targets.testbed import pdctl

OLD = "b2xkLXNlY3JldC12YWx1ZQ"  # every value below starts with one of these prefixes
NEW = "bmV3LXNlY3JldC12YWx1ZQ"
PLAIN = "plain-text-secret-value"


@pytest.fixture
def dry(monkeypatch):
    with dry_run_server(builtin_resources(), monkeypatch) as (srv, calls):
        yield srv, calls


def secret(name: str, token: str, same: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": NS,
            "labels": {
                "app.kubernetes.io/instance": name.rsplit("-", 1)[0],
                "app.kubernetes.io/managed-by": "pdctl",
            },
        },
        "type": "Opaque",
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
    out = pdctl("diff", str(spec), "--kubeconfig", str(kubeconfig))
    assert out.returncode == 1, out.stderr
    assert "prune     Secret/kcsec-token\n" in out.stdout, out.stdout
    assert leaks(out.stdout) == [], out.stdout
    assert "-  token: '***'\n" in out.stdout and "-  same: '***'\n" in out.stdout, out.stdout
    assert "-  note: '***'\n" in out.stdout, out.stdout
