"""A host whose scripts cannot be written starts none of its units: `up` fails naming the
upload, and no start.sh is run that is not there ('start.sh: No such file or directory')."""

from __future__ import annotations

from pathlib import Path

from tests.targets.testbed import SshEnv, free_port, host_entry, pdctl, stand_in_spec, write_spec


def test_a_failed_upload_starts_nothing_on_that_host(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
) -> None:
    spec = write_spec(
        tmp_path / "spec.yaml",
        stand_in_spec(
            "fup",
            [host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, venv=str(fake_venv))],
            {"replicas": 1, "port": free_port()},
        ),
    )
    deploy = tmp_path / "lo1" / "fup"
    deploy.mkdir(parents=True)
    (deploy / "fup-serve-0").write_text("a file where the unit's folder goes\n")
    up = pdctl("up", str(spec), "--yes", "--timeout", "30", "--known-hosts", ssh_env.known_hosts)
    assert up.returncode == 1, up.stdout + up.stderr
    out = up.stdout + up.stderr
    assert "uploading scripts" in out, out
    assert "No such file or directory" not in out, out
    assert "start script failed" not in out, out
