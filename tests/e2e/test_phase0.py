"""E2E phase 0 over SSH with a real `vllm serve` (CPU build): up, completion through the
printed address, status, secrets, idempotent second up, down leaves nothing. One server start
is shared by the tests of this module (they run in file order)."""

from __future__ import annotations

import json
import stat

import pytest

from tests.e2e.common import (
    assert_nothing_left,
    complete,
    down,
    host,
    known,
    phase0_spec,
    printed_urls,
    up,
)
from tests.targets.testbed import pdctl, processes_with, write_spec

pytestmark = pytest.mark.e2e
TOKEN = "hf_e2e_secret_value_do_not_leak_42"
PORT = 18700


@pytest.fixture(scope="module")
def served(vllm_cpu, ssh_env, tmp_path_factory):
    data = tmp_path_factory.mktemp("phase0")
    spec = write_spec(data / "spec.yaml", phase0_spec(
        vllm_cpu, "e2e0", PORT, [host(ssh_env, vllm_cpu, data)],
        secrets={"hfToken": {"env": "HF_TOKEN"}},
    ))
    result = up(spec, ssh_env, {"HF_TOKEN": TOKEN})
    yield spec, data, result
    down(spec, *known(ssh_env))


def test_up_serves_completions_at_the_printed_address(served):
    spec, data, result = served
    assert result.returncode == 0, result.stdout + result.stderr
    urls = printed_urls(result.stdout)
    assert urls == [f"http://127.0.0.1:{PORT}/v1"], result.stdout
    answer = complete(urls[0])
    assert answer["usage"]["completion_tokens"] == 8
    assert answer["choices"][0]["text"]


def test_status_shows_it_healthy(served, ssh_env):
    spec, data, result = served
    status = pdctl("status", str(spec), "-o", "json", *known(ssh_env))
    assert status.returncode == 0, status.stderr
    (row,) = json.loads(status.stdout)["instances"]
    assert (row["unit"], row["role"], row["health"], row["model"]) == (
        "e2e0-serve-0", "serve", "healthy", "tiny")
    assert row["pid"].isdigit()


def test_hf_token_is_in_no_file_command_line_or_log(served, ssh_env):
    spec, data, result = served
    assert TOKEN not in result.stdout + result.stderr
    rendered = pdctl("render", str(spec))
    assert rendered.returncode == 0 and TOKEN not in rendered.stdout
    deploy = data / "lo1" / "e2e0"
    secrets = deploy / "secrets.env"
    assert stat.S_IMODE(secrets.stat().st_mode) == 0o600
    assert f"HF_TOKEN={TOKEN}" in secrets.read_text()
    for path in deploy.rglob("*"):
        assert stat.S_IMODE(path.stat().st_mode) & 0o077 == 0, f"{path} is wider than 0600"
        if path.is_file() and path != secrets:
            assert TOKEN not in path.read_text(errors="replace"), path
    assert processes_with(TOKEN) == []  # no command line on the host (ps)
    logs = pdctl("logs", str(spec), *known(ssh_env))
    assert logs.returncode == 0 and "Application startup complete" in logs.stdout
    assert TOKEN not in logs.stdout


def test_second_up_changes_nothing(served, ssh_env):
    spec, data, result = served
    again = up(spec, ssh_env, {"HF_TOKEN": TOKEN})
    assert again.returncode == 0, again.stdout + again.stderr
    assert "nothing to change" in again.stdout
    assert "starting" not in again.stdout


def test_down_leaves_no_process_file_or_port(served, ssh_env, vllm_cpu):
    spec, data, result = served
    down = pdctl("down", str(spec), *known(ssh_env))
    assert down.returncode == 0, down.stderr
    assert "stopped e2e0-serve-0" in down.stdout
    assert_nothing_left(data / "lo1", [PORT])
    twice = pdctl("down", str(spec), *known(ssh_env))
    assert twice.returncode == 0 and "nothing was running" in twice.stdout
