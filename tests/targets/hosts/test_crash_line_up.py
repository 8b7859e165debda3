"""`up`'s failure line over real SSH when an engine dies (pdctl/targets/crashline.py): a
replacement that crashes the way vLLM's engine core does shows its first ERROR and the cause,
not the API server's "See root cause above" wrapper; one that dies saying nothing shows no
line of the previous run (the start marker of templates/process-start.sh.j2 separates runs in
the appended log)."""

from __future__ import annotations

from pathlib import Path

from tests.targets.test_crashline import ENGINE_CORE
from tests.targets.testbed import (
    SshEnv,
    free_port,
    host_entry,
    pdctl,
    processes_in,
    stand_in_spec,
    write_spec,
)


def venv_of(root: Path, script: str) -> Path:
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "vllm").write_text("#!/bin/sh\n" + script)
    (root / "bin" / "vllm").chmod(0o755)
    return root


def up(spec: Path, env: SshEnv, venv: Path, data: dict) -> tuple[int, str]:
    data["hosts"][0]["venv"] = str(venv)
    write_spec(spec, data)
    res = pdctl("up", str(spec), "--yes", "--known-hosts", env.known_hosts, "--timeout", "60")
    return res.returncode, res.stderr.strip()


def test_a_crash_shows_the_engine_cores_error_and_never_the_previous_run(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
):
    data = stand_in_spec("crash", [host_entry(ssh_env, ssh_env.host("lo1"), tmp_path)],
                         {"port": free_port()})
    spec = tmp_path / "spec.yaml"
    quoted = ENGINE_CORE.replace("'", "'\\''")
    crash = venv_of(tmp_path / "crash", f"printf '%s' '{quoted}' >&2\nexit 1\n")
    silent = venv_of(tmp_path / "silent", "exit 3\n")
    try:
        assert up(spec, ssh_env, fake_venv, data)[0] == 0  # a good version: its log has lines
        rc, line = up(spec, ssh_env, crash, data)
        assert rc == 1, line
        assert ("crash-serve-0 on host lo1 failed: the process exited before it became healthy; "
                "its log ends: EngineCore failed to start. ValueError: To serve at least one "
                "request") in line, line
        assert "See root cause above" not in line and "restored the previous version" in line
        rc, line = up(spec, ssh_env, silent, data)  # dies saying nothing
        assert rc == 1, line
        assert "the process exited before it became healthy; restored" in line, line
        assert "its log ends" not in line, line
    finally:
        pdctl("down", str(spec), "--known-hosts", ssh_env.known_hosts)
    assert processes_in(tmp_path) == []
