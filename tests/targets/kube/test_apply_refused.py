"""An object the API server refuses in the middle of `up` (an admission webhook's 422) stops
the run in one line that quotes the server's message and names what this run applied before
it, left in place. Against a kmock of its own (its refusal rule must not reach other tests)."""

from __future__ import annotations

import kmock

from tests.targets.conftest import builtin_resources, kube_server
from tests.targets.kube.test_errors import STATUS  # an admission webhook's 422
from tests.targets.kube.test_target import write_kube_files
from tests.targets.testbed import pdctl

NS = "vllm-inference"


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
