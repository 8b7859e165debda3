"""Kubernetes failures in one line (pdctl.targets.kube.errors): a kubeconfig pdctl cannot use
is exit 2 naming the files read, before anything connects; a server that cannot be reached
says why and what to check; a server that refuses an object quotes its Status message, not
the Status JSON. Against kmock and loopback ports (port 1 refuses; a socket that accepts and
never answers times out)."""

from __future__ import annotations

import socket
from pathlib import Path

import kmock
import pytest
from kubernetes import client

from pdctl.targets.kube.discovery import ApiError
from pdctl.targets.kube.errors import Refused, Unreached, naming_applied, unreachable
from pdctl.targets.kube.target import KubeTarget
from tests.targets.conftest import builtin_resources, kube_server
from tests.targets.kube.test_target import phase1, write_kube_files
from tests.targets.kubeconfig import kubeconfig_file, write_kubeconfig
from tests.targets.testbed import pdctl

NS = "vllm-inference"
DEAD = "http://127.0.0.1:1"  # nothing listens on port 1 of loopback


def kubeconfig(path: Path, contexts: list[str], current: str | None) -> Path:
    return kubeconfig_file(path, contexts, current, DEAD)


def status(tmp_path: Path, *args: str, env: dict[str, str] | None = None):
    spec, _ = write_kube_files(DEAD, tmp_path, "kerr")
    return pdctl("status", str(spec), *args, env=env)


def one_line(out) -> str:
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    return out.stderr.strip()


def test_a_file_that_is_not_a_kubeconfig_is_a_usage_error(tmp_path):
    bad = tmp_path / "bad.kc"
    bad.write_text("hello\n")
    out = status(tmp_path, "--kubeconfig", str(bad))
    line = one_line(out)
    assert out.returncode == 2, line
    assert line.startswith(f"error: {bad} is not a kubeconfig: it holds a YAML str"), line
    (tmp_path / "empty.kc").write_text("apiVersion: v1\nkind: Config\n")
    out = status(tmp_path, "--kubeconfig", str(tmp_path / "empty.kc"))
    assert out.returncode == 2 and "is not a kubeconfig: no clusters" in one_line(out)


def test_an_unknown_context_lists_the_contexts(tmp_path):
    multi = kubeconfig(tmp_path / "multi.kc", ["a", "b"], "a")
    out = status(tmp_path, "--kubeconfig", str(multi), "--context", "nope")
    line = one_line(out)
    assert out.returncode == 2, line
    assert line == f"error: no context 'nope' in {multi}; choose one of: a, b", line


def test_a_kubeconfig_list_names_the_files_read(tmp_path):
    second = kubeconfig(tmp_path / "second.kc", ["kmock2"], None)  # no current-context
    out = status(tmp_path, env={"KUBECONFIG": f"/nope:{second}"})
    line = one_line(out)
    assert out.returncode == 2, line
    assert f"(read {second}; /nope not found)" in line, line
    assert "sets no current-context; pass --context (one of: kmock2)" in line, line


def test_a_dead_server_says_where_and_what_to_check(tmp_path):
    out = status(tmp_path, "--kubeconfig", str(kubeconfig(tmp_path / "dead.kc", ["a"], "a")))
    line = one_line(out)
    assert out.returncode == 1, line
    assert line == (
        f"error: cannot reach the Kubernetes API at {DEAD} (connection refused); "
        "check --kubeconfig/--context"
    ), line


def test_tls_to_a_plain_http_server_and_a_silent_server(cluster):
    https = cluster.url.replace("http://", "https://")
    tls = KubeTarget(client.ApiClient(client.Configuration(host=https)), "ktls", NS)
    with pytest.raises(Exception) as caught:
        tls.pods()
    line = str(caught.value)
    assert line.startswith(f"cannot reach the Kubernetes API at {https} (TLS failed: "), line
    assert line.endswith("; check --kubeconfig/--context") and "\n" not in line, line
    with socket.socket() as silent:  # accepts (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        host = f"http://127.0.0.1:{silent.getsockname()[1]}"
        cfg = client.Configuration(host=host)
        cfg.retries = 0
        quiet = KubeTarget(client.ApiClient(cfg), "kquiet", NS, timeout=0.5)
        with pytest.raises(Exception) as caught:
            quiet.pods()
    assert str(caught.value) == (
        f"cannot reach the Kubernetes API at {host} (timed out); check --kubeconfig/--context"
    )


STATUS = {
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 422, "reason": "Invalid",
    "message": 'admission webhook "policy.example" denied the request: must not run as root',
}


def test_an_admission_refusal_quotes_the_status_message(cluster):
    for method in ("patch", "post"):
        for path in ("", "/krej-serve"):
            url = f"/apis/apps/v1/namespaces/{NS}/deployments{path}"
            cluster.emulator[method, url] << kmock.Response(status=422, payload=STATUS)
    _, objs = phase1("krej")
    tgt = KubeTarget(client.ApiClient(client.Configuration(host=cluster.url)), "krej", NS)
    with pytest.raises(ApiError) as caught:
        tgt.apply_objects(objs)
    line = caught.value.line()
    assert caught.value.status == 422 and isinstance(caught.value, Refused)
    assert line.startswith("the Kubernetes API refused Deployment/krej-serve ("), line
    assert line.endswith(
        '422 Unprocessable Entity): admission webhook "policy.example" denied the request: '
        "must not run as root; already applied, left in place: "
        "PersistentVolumeClaim/krej-model-cache, Service/krej (`pdctl down` removes them)"
    ), line
    assert '"kind"' not in line and "Status" not in line, line
    tgt.delete_objects(volumes=True)


def test_a_refusal_names_what_was_applied_before_it(cluster):
    """What an apply loop does with naming_applied (pdctl.targets.kube.apply is to use it):
    a refused object's line names those applied before it, left in place."""
    url = f"/apis/apps/v1/namespaces/{NS}/deployments"
    for method, path in (("patch", f"{url}/kpart-serve"), ("post", url)):
        cluster.emulator[method, path] << kmock.Response(status=403, payload=STATUS)
    _, objs = phase1("kpart")
    tgt = KubeTarget(client.ApiClient(client.Configuration(host=cluster.url)), "kpart", NS)
    done: list[tuple[str, str]] = []
    with pytest.raises(Refused) as caught:
        for obj in objs:  # PVC, Service, then the Deployment (refused)
            with naming_applied(done):
                tgt.apply_objects([obj])
            done.append((obj["kind"], obj["metadata"]["name"]))
    assert caught.value.line().endswith(
        "must not run as root; already applied, left in place: "
        "PersistentVolumeClaim/kpart-model-cache, Service/kpart (`pdctl down` removes them)"
    ), caught.value.line()
    with pytest.raises(Unreached) as gone:
        with naming_applied(done):
            KubeTarget(client.ApiClient(client.Configuration(host=DEAD)), "kpart", NS).pods()
    assert "(connection refused); check --kubeconfig/--context; already applied" in str(gone.value)
    tgt.delete_objects(volumes=True)


def test_a_name_that_does_not_resolve_says_dns():
    from urllib3.exceptions import MaxRetryError, NameResolutionError

    why = NameResolutionError("k8s.invalid", None, socket.gaierror(-2, "Name or service not known"))
    line = str(unreachable("https://k8s.invalid:6443", MaxRetryError(None, "/api", why)))
    assert line == (
        "cannot reach the Kubernetes API at https://k8s.invalid:6443 (DNS: the host name does "
        "not resolve); check --kubeconfig/--context"
    )


def test_the_kubeconfig_of_the_tests_still_loads(cluster, tmp_path):
    out = pdctl(
        "status", str(write_kube_files(cluster.url, tmp_path, "kok")[0]), "--kubeconfig",
        str(write_kubeconfig(tmp_path, cluster.url)),
    )
    assert out.returncode in (0, 1) and "error:" not in out.stderr, out.stderr


# An object the API server refuses in the middle of `up` (an admission webhook's 422) stops
# the run in one line that quotes the server's message and names what this run applied before
# it, left in place. Against a kmock of its own (its refusal rule must not reach other tests).
def test_up_names_what_it_applied_before_a_refused_object(tmp_path) -> None:
    with kube_server(builtin_resources()) as srv:
        url = f"/apis/apps/v1/namespaces/{NS}/deployments"
        for method, path in (("patch", f"{url}/krefused-serve"), ("post", url)):
            srv.emulator[method, path] << kmock.Response(status=422, payload=STATUS)
        spec, kubeconfig = write_kube_files(srv.url, tmp_path, "krefused")
        up = pdctl("up", str(spec), "--yes", "--timeout", "1", "--kubeconfig", str(kubeconfig))
        assert up.returncode == 1, up.stdout + up.stderr
        line = up.stderr.strip()
        assert len(line.splitlines()) == 1, line
        assert "Deployment/krefused-serve" in line and "must not run as root" in line, line
        assert line.endswith(
            "already applied, left in place: PersistentVolumeClaim/krefused-model-cache, "
            "Service/krefused (`pdctl down` removes them)"
        ), line
