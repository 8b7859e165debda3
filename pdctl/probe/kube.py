"""Cluster facts through the kubernetes client (imported here only): nodes, HAMi workloads,
CRDs. Recorded as JSON in the shapes `kubectl get ... -o json` prints."""

from __future__ import annotations

import json
from typing import Any

from pdctl.facts.cluster import HAMI_COMPONENTS

SELECTOR = "app.kubernetes.io/component in ({})".format(",".join(HAMI_COMPONENTS))


def _list(api_client: Any, items: Any, kind: str, api_version: str) -> str:
    data = api_client.sanitize_for_serialization(items)
    for item in data.get("items", []):
        item.setdefault("kind", kind)
        item.setdefault("apiVersion", api_version)
    return json.dumps(data, indent=1, sort_keys=True)


def _crds(api_client: Any, crds: Any) -> str:
    # Names, groups and kinds only: full CRD schemas are large and not needed.
    items = [
        {
            "metadata": {"name": c.metadata.name},
            "spec": {"group": c.spec.group, "names": {"kind": c.spec.names.kind}},
        }
        for c in crds.items
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
            return {"cluster.err": f"no Kubernetes configuration: {exc}\n"}
    api = client.ApiClient()
    raw: dict[str, str] = {}
    calls = {
        "nodes.json": lambda: _list(api, client.CoreV1Api(api).list_node(), "Node", "v1"),
        "workloads.json": lambda: _workloads(api, client),
        "crds.json": lambda: _crds(
            api, client.ApiextensionsV1Api(api).list_custom_resource_definition()
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


def _workloads(api: Any, client: Any) -> str:
    apps = client.AppsV1Api(api)
    deployments = api.sanitize_for_serialization(
        apps.list_deployment_for_all_namespaces(label_selector=SELECTOR)
    )
    daemonsets = api.sanitize_for_serialization(
        apps.list_daemon_set_for_all_namespaces(label_selector=SELECTOR)
    )
    items = []
    for kind, data in (("Deployment", deployments), ("DaemonSet", daemonsets)):
        for item in data.get("items", []):
            item["kind"] = kind
            item["apiVersion"] = "apps/v1"
            items.append(item)
    return json.dumps({"kind": "List", "items": items}, indent=1, sort_keys=True)
