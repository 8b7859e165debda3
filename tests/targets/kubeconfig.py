"""A kubeconfig for the kmock API server of a test (tests/targets/conftest.py: kube_server)."""

from __future__ import annotations

from pathlib import Path

import yaml


def write_kubeconfig(folder: Path, server: str) -> Path:
    """`folder`/kubeconfig: one context, kmock, at `server` (its URL), with no credentials."""
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1", "kind": "Config", "current-context": "kmock",
                "clusters": [{"name": "kmock", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "kmock", "context": {"cluster": "kmock", "user": "u"}}],
            }
        )
    )
    return kubeconfig
