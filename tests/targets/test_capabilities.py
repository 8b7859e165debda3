"""What a target can do is data (each package's CAPABILITIES), read without connecting, and
it is what the CLI asks: the capabilities of a plan's target match the target it opens."""

from __future__ import annotations

import importlib

import pytest

from pdctl.cli.specfile import load
from pdctl.targets import capabilities, package
from pdctl.targets.base import Connect
from tests.conftest import ROOT

CASES = [
    ("phase1-k8s.yaml", {}, "kubernetes", "KubeTarget"),
    (
        "phase0-docker.yaml", {"gpu-a": "unix:///nonexistent/docker.sock"}, "docker",
        "ContainerHosts",
    ),
    ("phase0-conda.yaml", {}, "hosts", "HostsTarget"),
]


@pytest.mark.parametrize(("example", "urls", "kind", "cls"), CASES)
def test_a_plans_capabilities_are_its_targets(example, urls, kind, cls) -> None:
    plan, _bundle = load(str(ROOT / "examples" / example), None, None)
    options = Connect(docker_urls=urls)
    caps = capabilities(plan, options)
    assert caps.kind == kind
    target = getattr(importlib.import_module(f"{package(plan, options).__name__}.target"), cls)
    assert target.kind == caps.kind
    # Only SSH hosts go on past a failed unit; only Kubernetes asks the server for a dry run,
    # waits for its pods on down and keeps volumes unless told; secrets are sent where the
    # target writes them (Kubernetes references Secrets by name).
    assert caps.keep_going == (kind == "hosts") == caps.partial
    assert caps.server_dry_run == caps.down_timeout == caps.volumes == (kind == "kubernetes")
    assert caps.sends_secrets == (kind != "kubernetes")
    # `pdctl restart` restarts units on hosts and Docker; Kubernetes has kubectl rollout restart
    assert caps.restarts == (kind != "kubernetes")


def test_keep_going_is_refused_with_what_a_failed_run_leaves(capsys) -> None:
    from tests.helpers import run_cli

    spec = str(ROOT / "examples" / "phase1-k8s.yaml")
    code, _out, err = run_cli(["up", spec, "--keep-going", "--dry-run", "--offline"], capsys)
    assert code == 2
    assert "with Kubernetes a failed run is not undone" in err
