"""E2E failure: an engine that cannot start (its model path does not exist) makes `up` fail
with the engine's own error line, and nothing is left running."""

from __future__ import annotations

import pytest

from tests.e2e.common import (
    ENGINE_ENV,
    assert_nothing_left,
    host,
    known,
    model_section,
    phase0_spec,
    up,
)
from tests.targets.testbed import pdctl, processes_in, write_spec

pytestmark = pytest.mark.e2e
PORT = 18745  # no other e2e file uses it (test_top: 18740)


def test_engine_that_cannot_start_fails_up_with_its_own_error(vllm_cpu, ssh_env, tmp_path):
    missing = "/nonexistent/pdctl-e2e-model"
    spec = write_spec(tmp_path / "spec.yaml", phase0_spec(
        vllm_cpu, "e2efail", PORT, [host(ssh_env, vllm_cpu, tmp_path)],
        model=model_section(vllm_cpu, missing), engine={"device": "cpu", "env": ENGINE_ENV},
    ))
    result = up(spec, ssh_env)
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    assert "FAILED e2efail-serve-0 on host lo1" in out
    assert "the process exited before it became healthy" in out
    # the engine's own error line (huggingface_hub rejects the path as a repo id)
    assert f"'{missing}'" in out and "Error" in out, out
    assert "stopped what this run started: e2efail-serve-0" in out
    # the one-line error names the engine's own last log line
    assert "e2efail-serve-0 on host lo1 failed" in result.stderr
    assert "its log ends:" in result.stderr and f"'{missing}'" in result.stderr
    assert processes_in(tmp_path / "lo1") == []
    pdctl("down", str(spec), *known(ssh_env))
    assert_nothing_left(tmp_path / "lo1", [PORT])
