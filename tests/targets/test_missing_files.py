"""Files named on the command line that are missing or broken are said as such, in one line,
before anything connects (review finding 13): --known-hosts, --kubeconfig, $KUBECONFIG, a
malformed kubeconfig, no kubeconfig at all. A missing DEFAULT ~/.ssh/known_hosts is normal:
unknown keys are refused as before."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from tests.conftest import ROOT, unreached_spec
from tests.helpers import checked
from tests.targets.kubeconfig import kubeconfig_file
from tests.targets.testbed import SshEnv, lo1_spec, pdctl

# Its cluster is the kubeconfig's: the tests reach none.
PHASE1 = str(ROOT / "examples" / "phase1-k8s.yaml")


def _hosts_spec(tmp_path: Path, port: int) -> Path:
    return unreached_spec(tmp_path, port, "files", 18998)


def _no_kube_env(home: Path) -> dict[str, str]:
    """pdctl's environment with HOME at `home` and no KUBECONFIG or PDCTL_KNOWN_HOSTS."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "PDCTL_KNOWN_HOSTS")}
    return dict(env, HOME=str(home))


def _one_line(out) -> str:
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert "\\n" not in lines[0] and "Traceback" not in out.stderr
    return lines[0]


@pytest.mark.parametrize("cmd", ["status", "up", "down", "logs"])
def test_a_known_hosts_file_that_does_not_exist_is_a_usage_error(
    tmp_path: Path, listener: socket.socket, cmd: str
) -> None:
    spec = _hosts_spec(tmp_path, listener.getsockname()[1])
    missing = tmp_path / "nope" / "known_hosts"
    out = pdctl(cmd, str(spec), "--known-hosts", str(missing), *(["--yes"] * (cmd == "up")))
    assert out.returncode == 2, out
    line = _one_line(out)
    assert line.startswith(f"error: known_hosts file {missing} does not exist; "), line
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing connected
    assert not missing.exists()


def test_the_default_known_hosts_may_be_missing(ssh_env: SshEnv, tmp_path: Path) -> None:
    """No ~/.ssh/known_hosts (a new account): connecting refuses the unknown key, as before."""
    path = lo1_spec(ssh_env, tmp_path, "files", Path("/nonexistent"), 18998)
    out = checked(pdctl("logs", str(path), env=_no_kube_env(tmp_path / "home")), 1)
    assert "unknown host key, not in ~/.ssh/known_hosts" in _one_line(out)


def test_a_kubeconfig_that_does_not_exist_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "kubeconfig"
    out = checked(pdctl("status", PHASE1, "--kubeconfig", str(missing)), 2)
    line = _one_line(out)
    assert line.startswith(f"error: kubeconfig file {missing} does not exist; "), line
    env = dict(_no_kube_env(tmp_path), KUBECONFIG=str(missing))
    out = checked(pdctl("top", PHASE1, "--once", env=env), 2)
    assert _one_line(out).startswith(f"error: kubeconfig file {missing} does not exist; ")


def test_a_malformed_kubeconfig_is_one_plain_line(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nclusters: [\n  - {name: a\nkind: Config\n")
    out = checked(pdctl("status", PHASE1, "--kubeconfig", str(bad)), 2)
    line = _one_line(out)
    assert line.startswith(f"error: kubeconfig {bad}: not valid YAML"), line
    assert "line 3" in line


def test_no_kubeconfig_at_all_says_how_to_give_one(tmp_path: Path) -> None:
    out = checked(pdctl("status", PHASE1, env=_no_kube_env(tmp_path)), 2)
    line = _one_line(out)
    assert "~/.kube/config" in line and line.endswith("set KUBECONFIG or pass --kubeconfig")


def test_a_kubeconfig_that_exists_still_loads(tmp_path: Path) -> None:
    """The checks above leave a good kubeconfig alone (the cluster it names is not there)."""
    good = kubeconfig_file(tmp_path / "kubeconfig", ["c"], "c", "https://127.0.0.1:9")
    out = checked(pdctl("status", PHASE1, "--kubeconfig", str(good)), 1)
    line = _one_line(out)  # about the cluster, not the file (whose name it does not say)
    assert line.startswith("error: cannot reach the Kubernetes API at https://127.0.0.1:9 ("), line
    assert str(good) not in line, line
