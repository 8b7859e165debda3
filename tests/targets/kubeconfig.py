"""A kubeconfig for the kmock API server of a test (tests/targets/conftest.py: kube_server)."""

from __future__ import annotations

from pathlib import Path

import yaml


def kubeconfig_file(path: Path, contexts: list[str], current: str | None, server: str) -> Path:
    """`path`: a kubeconfig with a cluster and a context of each name in `contexts`, all at
    `server` (its URL), with no credentials; `current` its current-context (None: unset)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", **({"current-context": current} if current else {}),
        "clusters": [{"name": c, "cluster": {"server": server}} for c in contexts],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": c, "context": {"cluster": c, "user": "u"}} for c in contexts],
    }))
    return path


def write_kubeconfig(folder: Path, server: str) -> Path:
    """`folder`/kubeconfig: one context, kmock, at `server` (its URL), with no credentials."""
    return kubeconfig_file(folder / "kubeconfig", ["kmock"], "kmock", server)
