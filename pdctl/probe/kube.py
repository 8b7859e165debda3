"""Cluster facts through the kubernetes client (imported here only): nodes, HAMi workloads,
CRDs. Recorded as JSON in the shapes `kubectl get ... -o json` prints."""

from __future__ import annotations

import json
import os
from typing import Any

from pdctl.facts.cluster import HAMI_COMPONENTS

SELECTOR = "app.kubernetes.io/component in ({})".format(",".join(HAMI_COMPONENTS))


def _json(response: Any) -> dict[str, Any]:
    """The API server's own JSON (no client-side model validation in between)."""
    data = json.loads(response.data)
    return data if isinstance(data, dict) else {}


def _list(response: Any, kind: str, api_version: str) -> str:
    data = _json(response)
    for item in data.get("items", []):
        item.setdefault("kind", kind)
        item.setdefault("apiVersion", api_version)
    return json.dumps(data, indent=1, sort_keys=True)


def _crds(response: Any) -> str:
    # Names, groups and kinds only: full CRD schemas are large and not needed.
    items = [
        {
            "metadata": {"name": c.get("metadata", {}).get("name", "")},
            "spec": {
                "group": c.get("spec", {}).get("group", ""),
                "names": {"kind": c.get("spec", {}).get("names", {}).get("kind", "")},
            },
        }
        for c in _json(response).get("items", [])
    ]
    return json.dumps({"kind": "List", "items": items}, indent=1, sort_keys=True)


def gather(kubeconfig: str | None, context: str | None) -> dict[str, str]:
    """Raw cluster outputs; a failure becomes `<name>.err` (or `cluster.err`), never a crash."""
    try:
        from kubernetes import client, config
        from kubernetes.config.config_exception import ConfigException
    except ImportError as exc:
        return {"cluster.err": f"the kubernetes package is not installed: {exc}\n"}
    try:
        config.load_kube_config(config_file=kubeconfig, context=context)
    except (ConfigException, OSError, TypeError) as exc:
        try:
            config.load_incluster_config()
        except ConfigException:
            return {"cluster.err": f"no Kubernetes configuration: {_why(kubeconfig, exc)}\n"}
    api = client.ApiClient()
    raw: dict[str, str] = {}
    calls = {
        "nodes.json": lambda: _list(
            client.CoreV1Api(api).list_node(_preload_content=False), "Node", "v1"
        ),
        "workloads.json": lambda: _workloads(api, client),
        "crds.json": lambda: _crds(
            client.ApiextensionsV1Api(api).list_custom_resource_definition(_preload_content=False)
        ),
    }
    for name, call in calls.items():
        try:
            raw[name] = call()
        except Exception as exc:  # ApiException (403, 404), connection errors: record them
            status = getattr(exc, "status", None)
            reason = getattr(exc, "reason", None) or str(exc).splitlines()[0]
            raw[name + ".err"] = f"{status or 'error'}: {reason}\n"
    return raw


def _why(kubeconfig: str | None, exc: Exception) -> str:
    """Why no configuration loaded, naming the file(s) looked for when none exists (the
    client says only "Invalid kube-config file. No configuration found.")."""
    from pdctl.targets.kube.api import DEFAULT_KUBECONFIG
    from pdctl.targets.kube.errors import files_of

    files = kubeconfig or os.environ.get("KUBECONFIG") or DEFAULT_KUBECONFIG
    if not files_of(files)[0]:
        where = (
            "--kubeconfig" if kubeconfig else "$KUBECONFIG" if "KUBECONFIG" in os.environ else ""
        )
        named = f" ({where})" if where else ""
        return f"{files}{named} does not exist, and this is not a pod (no in-cluster account)"
    return " ".join(str(exc).split())


def _workloads(api: Any, client: Any) -> str:
    apps = client.AppsV1Api(api)
    lists = (
        ("Deployment", apps.list_deployment_for_all_namespaces),
        ("DaemonSet", apps.list_daemon_set_for_all_namespaces),
    )
    items = []
    for kind, call in lists:
        for item in _json(call(label_selector=SELECTOR, _preload_content=False)).get("items", []):
            labels = item.get("metadata", {}).get("labels") or {}
            if labels.get("app.kubernetes.io/component") not in HAMI_COMPONENTS:
                continue  # servers that ignore the selector
            item["kind"] = kind
            item["apiVersion"] = "apps/v1"
            items.append(item)
    return json.dumps({"kind": "List", "items": items}, indent=1, sort_keys=True)
