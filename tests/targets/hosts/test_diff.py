"""`pdctl diff` on hosts over a real sshd host (tests/services.sh) with the stand-in engine:
new units, no changes after `up`, and the unified diff of a replaced unit's start script."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers import checked
from tests.targets.hosts.test_ssh_up import free_port, known
from tests.targets.testbed import SshEnv, deployed, lo1_spec, pdctl


def one_host_spec(env: SshEnv, venv: Path, data: Path, port: int, max_len: int) -> Path:
    model = {"name": "stand-in", "servedName": "stand-in", "maxModelLen": max_len}
    return lo1_spec(env, data, "fdiff", venv, port, model=model)


def test_diff_on_a_host_new_then_nothing_then_the_changed_script(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
):
    port = free_port()
    spec = one_host_spec(ssh_env, fake_venv, tmp_path, port, 2048)
    new = checked(pdctl("diff", str(spec), *known(ssh_env)), 1)
    assert new.stdout.startswith("start     fdiff-serve-0 on lo1 (new)\n")
    assert new.stdout.endswith("1 start\n")
    with deployed(spec, *known(ssh_env)):
        same = checked(pdctl("diff", str(spec), *known(ssh_env)))
        assert same.stdout == "1 keep\nno changes\n"
        one_host_spec(ssh_env, fake_venv, tmp_path, port, 4096)
        changed = checked(pdctl("diff", str(spec), *known(ssh_env)), 1)
        lines = changed.stdout.splitlines()
        assert lines[0] == "restart   fdiff-serve-0 on lo1 (spec changed)"
        folder = tmp_path / "lo1" / "fdiff" / "fdiff-serve-0"
        assert lines[1] == f"--- lo1:{folder}/start.sh"
        assert lines[2] == "+++ hosts/lo1/fdiff-serve-0/start.sh"
        removed = [x for x in lines if x.startswith("-") and "2048" in x]
        added = [x for x in lines if x.startswith("+") and "4096" in x]
        assert removed and added, changed.stdout
        # diff changed nothing: the host still runs the first version
        assert "2048" in (folder / "start.sh").read_text()
        # Stopped, then changed: a start of the new version, whose script diff is shown too.
        stop = subprocess.run(["bash", str(folder / "stop.sh")], capture_output=True, text=True)
        assert stop.returncode == 0, stop.stderr
        stopped = checked(pdctl("diff", str(spec), *known(ssh_env)), 1)
        lines = stopped.stdout.splitlines()
        assert lines[0] == "start     fdiff-serve-0 on lo1 (spec changed, not running)", lines
        assert lines[1] == f"--- lo1:{folder}/start.sh", lines
        assert [x for x in lines if x.startswith("+") and "4096" in x], stopped.stdout


def test_diff_of_an_unreachable_host_is_an_error(ssh_env: SshEnv, fake_venv: Path, tmp_path: Path):
    model = {"name": "stand-in", "servedName": "stand-in", "maxModelLen": 2048}
    nobody = {"port": free_port()}  # nobody listens there
    spec = lo1_spec(ssh_env, tmp_path, "fdiff", fake_venv, host=nobody, model=model)
    out = checked(pdctl("diff", str(spec), *known(ssh_env), "--connect-timeout", "2"), 2)
    assert len(out.stderr.splitlines()) == 1 and "lo1" in out.stderr
