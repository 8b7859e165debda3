"""`pdctl restart SPEC UNIT` over real SSH (tests/services.sh hosts) with the stand-in engine:
the named unit gets a new server process and is healthy again, the others keep theirs; a unit
the spec does not have, a deployment that differs from the spec, and Kubernetes are refused
before anything is restarted."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers import checked, known
from tests.targets.hosts.test_ssh_up import deploy, pids_of
from tests.targets.testbed import SshEnv, pdctl, status_rows


@pytest.fixture
def running(ssh_env: SshEnv, fake_venv: Path, tmp_path: Path):
    spec, port, secret, up = deploy(ssh_env, fake_venv, tmp_path)
    checked(up)
    yield spec, secret
    pdctl("down", str(spec), *known(ssh_env))


def test_restart_gives_the_unit_a_new_process_and_keeps_the_others(running, ssh_env) -> None:
    spec, secret = running
    before = pids_of(spec, ssh_env)
    assert set(before) == {"fake-serve-0", "fake-serve-1"}
    dry = pdctl("restart", str(spec), "fake-serve-1", *known(ssh_env), env=secret, input="n\n")
    assert dry.returncode != 0 and "restart" in dry.stdout and "asked" in dry.stdout, dry.stdout
    assert pids_of(spec, ssh_env) == before  # not confirmed: nothing restarted
    done = checked(pdctl("restart", str(spec), "fake-serve-1", "--yes", *known(ssh_env),
                         env=secret))
    assert "restarted fake-serve-1: healthy." in done.stdout, done.stdout
    after = status_rows(spec, *known(ssh_env))
    assert after["fake-serve-0"]["pid"] == before["fake-serve-0"]
    assert after["fake-serve-1"]["pid"] != before["fake-serve-1"]
    assert {r["health"] for r in after.values()} == {"healthy"}
    again = checked(pdctl("up", str(spec), "--yes", *known(ssh_env), env=secret))
    assert "nothing to change" in again.stdout  # the same scripts: up keeps it


def test_an_unknown_unit_is_one_line_and_exit_2(running, ssh_env) -> None:
    spec, secret = running
    before = pids_of(spec, ssh_env)
    out = pdctl("restart", str(spec), "fake-serve-9", "--yes", *known(ssh_env), env=secret)
    assert out.returncode == 2, out.stdout + out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert "has no unit fake-serve-9" in line and "fake-serve-0, fake-serve-1" in line, line
    assert pids_of(spec, ssh_env) == before


def test_a_deployment_that_differs_from_the_spec_is_refused(running, ssh_env, tmp_path) -> None:
    spec, secret = running
    before = pids_of(spec, ssh_env)
    data = yaml.safe_load(spec.read_text())
    data["hosts"][1]["hfCache"] = str(tmp_path / "cache2")  # host 2's unit would change
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(data, sort_keys=False))
    out = pdctl("restart", str(changed), "fake-serve-0", "--yes", *known(ssh_env), env=secret)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "is not what the spec says (fake-serve-1 on " in out.stderr, out.stderr
    assert "spec changed" in out.stderr and "`pdctl up` brings it in line" in out.stderr
    assert pids_of(spec, ssh_env) == before


def test_kubernetes_is_refused_with_the_kubectl_command(tmp_path) -> None:
    from tests.conftest import ROOT

    out = pdctl("restart", str(ROOT / "examples/phase1-k8s.yaml"), "x", "--yes")
    assert out.returncode == 2, out.stdout + out.stderr
    assert "not on Kubernetes" in out.stderr and "rollout restart" in out.stderr, out.stderr


def test_role_restarts_every_unit_of_it_and_a_bad_role_or_nothing_named_is_exit_2(
    running, ssh_env
) -> None:
    spec, secret = running
    before = pids_of(spec, ssh_env)
    for argv, words in (([], "name the units to restart"),
                        (["--role", "decode"], "fake has no unit of role 'decode'")):
        out = pdctl("restart", str(spec), *argv, "--yes", *known(ssh_env), env=secret)
        assert out.returncode == 2, out.stdout + out.stderr
        (line,) = out.stderr.strip().splitlines()
        assert words in line, line
    assert pids_of(spec, ssh_env) == before
    done = checked(pdctl("restart", str(spec), "--role", "serve", "--yes", *known(ssh_env),
                         env=secret))
    assert "restarted fake-serve-0, fake-serve-1: healthy." in done.stdout, done.stdout
    after = pids_of(spec, ssh_env)
    assert all(after[u] != before[u] for u in before), (before, after)
