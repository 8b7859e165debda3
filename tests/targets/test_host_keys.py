"""SSH host keys and identities against the real sshd test hosts (`up`, `status`, `preflight`).

- `--accept-new-host-keys` with `--dry-run` trusts a new key for that run only: known_hosts is
  not written (a dry run changes nothing).
- known_hosts markers (OpenSSH): a key on an `@revoked` line is refused, even when another line
  lists it as known and even with --accept-new-host-keys; `@cert-authority` lines (pdctl cannot
  check host certificates) are skipped, and a host trusted only through one is refused with a
  line saying so. A line that does not parse is one error naming file:line.
- A missing identity file is a usage error naming the file, before connecting.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import checked, known
from tests.targets import testbed
from tests.targets.testbed import SshEnv, pdctl, write_spec


def lo1_spec(env: SshEnv, tmp: Path, **host: object) -> Path:
    return testbed.lo1_spec(env, tmp, "keys", port=18997, host=host)


def lo1_line(env: SshEnv) -> list[str]:
    """lo1's known_hosts line as fields: [name, type, base64]."""
    for line in Path(env.known_hosts).read_text().splitlines():
        if line.startswith("[127.0.0.1]:2222 "):
            return line.split()[:3]
    pytest.skip("lo1 is not in the test known_hosts")


def one_error_line(proc) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_dry_run_accepts_a_new_key_without_writing_known_hosts(ssh_env, tmp_path):
    spec = lo1_spec(ssh_env, tmp_path)
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    dry = pdctl("up", str(spec), "--dry-run", "--known-hosts", str(empty), "--accept-new-host-keys")
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "keys-serve-0" in dry.stdout
    assert empty.read_text() == ""
    # Without --dry-run the accepted key is recorded (status changes nothing else).
    checked(pdctl("status", str(spec), "--known-hosts", str(empty), "--accept-new-host-keys"))
    (line,) = empty.read_text().splitlines()
    assert line.split()[:3] == lo1_line(ssh_env)


def test_revoked_key_is_refused_even_when_listed_as_known(ssh_env, tmp_path):
    spec = lo1_spec(ssh_env, tmp_path)
    name, ktype, key = lo1_line(ssh_env)
    known = tmp_path / "known_hosts"
    text = f"{name} {ktype} {key}\n@revoked * {ktype} {key} retired\n"
    known.write_text(text)
    for extra in ([], ["--accept-new-host-keys"]):
        proc = checked(pdctl("up", str(spec), "--dry-run", "--known-hosts", str(known), *extra), 1)
        line = one_error_line(proc)
        assert "host lo1 ([127.0.0.1]:2222): its host key is revoked" in line, line
        assert f"{known}:2" in line, line
    assert known.read_text() == text


def test_revoked_key_is_not_accepted_as_new(ssh_env, tmp_path):
    spec = lo1_spec(ssh_env, tmp_path)
    _, ktype, key = lo1_line(ssh_env)
    known = tmp_path / "known_hosts"
    text = f"@revoked [127.0.0.1]:2222 {ktype} {key}\n"
    known.write_text(text)
    accept = ["--known-hosts", str(known), "--accept-new-host-keys"]
    proc = pdctl("up", str(spec), "--dry-run", *accept)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "its host key is revoked" in one_error_line(proc)
    assert known.read_text() == text
    real = pdctl("up", str(spec), "--yes", *accept)
    assert real.returncode == 1 and "revoked" in one_error_line(real)
    assert known.read_text() == text


def test_cert_authority_lines_are_skipped_and_named_when_they_are_all_there_is(ssh_env, tmp_path):
    spec = lo1_spec(ssh_env, tmp_path)
    name, ktype, key = lo1_line(ssh_env)
    other_ca = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    known = tmp_path / "known_hosts"
    known.write_text(f"@cert-authority *.example ssh-ed25519 {other_ca}\n{name} {ktype} {key}\n")
    checked(pdctl("up", str(spec), "--dry-run", "--known-hosts", str(known)))
    only_ca = tmp_path / "ca_only"
    only_ca.write_text(f"@cert-authority [127.0.0.1]:* ssh-ed25519 {other_ca}\n")
    refused = checked(pdctl("up", str(spec), "--dry-run", "--known-hosts", str(only_ca)), 1)
    line = one_error_line(refused)
    assert "unknown host key" in line and f"{only_ca}:1" in line and "@cert-authority" in line


def test_a_line_that_does_not_parse_is_one_error_naming_the_line(ssh_env, tmp_path):
    spec = lo1_spec(ssh_env, tmp_path)
    name, ktype, key = lo1_line(ssh_env)
    for bad in (
        f"@revoked {name} {key}", f"{name} {ktype} not-base64!", f"@trusted * {ktype} {key}",
    ):
        known = tmp_path / "known_hosts"
        known.write_text(f"# mine\n{name} {ktype} {key}\n{bad}\n")
        proc = checked(pdctl("up", str(spec), "--dry-run", "--known-hosts", str(known)), 2)
        assert one_error_line(proc).startswith(f"error: {known}:3: "), proc.stderr


def test_missing_identity_file_is_named(ssh_env, tmp_path):
    missing = tmp_path / "no_such_key"
    spec = lo1_spec(ssh_env, tmp_path, identityFile=str(missing))
    proc = checked(pdctl("up", str(spec), "--dry-run", "--known-hosts", ssh_env.known_hosts), 2)
    line = one_error_line(proc)
    assert f"identityFile {missing}: no such file" in line and "host lo1" in line, line
    data = __import__("yaml").safe_load(spec.read_text())
    del data["hosts"][0]["identityFile"]
    write_spec(spec, data)
    proc = pdctl("up", str(spec), "--dry-run", *known(ssh_env), "--identity", str(missing))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"--identity {missing}: no such file" in one_error_line(proc)
    # status and down tolerate unreachable hosts, but a bad option is not an unreachable host
    for command in ("status", "down"):
        proc = pdctl(command, str(spec), "--known-hosts", ssh_env.known_hosts,
                     "--identity", str(missing))
        assert proc.returncode == 2, (command, proc.stdout + proc.stderr)
        assert f"--identity {missing}: no such file" in one_error_line(proc)


def test_preflight_uses_the_same_host_key_rules(ssh_env, tmp_path):
    spec = lo1_spec(ssh_env, tmp_path)
    _, ktype, key = lo1_line(ssh_env)
    known = tmp_path / "known_hosts"
    known.write_text(f"@revoked * {ktype} {key}\n")
    proc = pdctl(
        "preflight", str(spec), "--known-hosts", str(known), "--accept-new-host-keys", "-o", "json"
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "its host key is revoked" in proc.stdout
    assert known.read_text() == f"@revoked * {ktype} {key}\n"
    missing = tmp_path / "no_such_key"
    spec = lo1_spec(ssh_env, tmp_path, identityFile=str(missing))
    proc = checked(pdctl("preflight", str(spec), "--known-hosts", ssh_env.known_hosts), 2)
    assert f"identityFile {missing}: no such file" in one_error_line(proc)
