"""`up` asks the hosts about their units in parallel: one poll round probes the engines of
different hosts at the same time, instead of one after another (32 hosts used to wait ~4 s
for the last engine to be seen healthy).

No timing is assumed: each host's stand-in engine answers /health only while the other host's
/health request is in flight as well (FAKE_VLLM_MEET in fake_vllm.py). Probed one after
another, each request waits for the other until pdctl gives it up, so `up` never sees them
healthy and fails at its --timeout; probed together they meet and both answer 200.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.helpers import checked
from tests.targets.hosts.test_ssh_up import free_port, known
from tests.targets.testbed import HERE, SshEnv, deployed, host_entry, stand_in_spec, write_spec


def meeting_venv(root: Path, meet: Path, me: str, other: str) -> Path:
    """bin/vllm: the stand-in engine, told to answer /health only when `other` asks too."""
    (root / "bin").mkdir(parents=True)
    shutil.copy(HERE / "fake_vllm.py", root / "bin" / "fake_vllm.py")
    script = root / "bin" / "vllm"
    script.write_text(
        "#!/bin/sh\n"
        f"FAKE_VLLM_MEET='{meet}:{me}:{other}' "
        'exec python3 "$(dirname "$0")/fake_vllm.py" "$@"\n'
    )
    script.chmod(0o755)
    return root


def test_up_probes_the_engines_of_two_hosts_at_the_same_time(ssh_env: SshEnv, tmp_path) -> None:
    names = [h.name for h in ssh_env.hosts]
    if "node1" not in names:
        pytest.skip("needs the network-namespace test host node1 (two hosts, one port)")
    meet = tmp_path / "meet"
    meet.mkdir()
    data = tmp_path / "data"
    hosts = []
    for host, other in (("lo1", "node1"), ("node1", "lo1")):
        venv = meeting_venv(tmp_path / f"venv-{host}", meet, host, other)
        hosts.append(host_entry(ssh_env, ssh_env.host(host), data, venv=str(venv)))
    serve = {"replicas": 2, "port": free_port()}
    spec = write_spec(tmp_path / "spec.yaml", stand_in_spec("meet", hosts, serve))
    with deployed(spec, *known(ssh_env)) as done:
        healthy = [line for line in done["up"].stdout.splitlines() if line.endswith(": healthy")]
        assert len(healthy) == 2, done["up"].stdout
        assert sorted(p.name for p in meet.iterdir()) == ["lo1", "node1"]
    checked(done["down"])
