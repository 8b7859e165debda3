"""E2E: one real vLLM instance (CPU build) as a multi-node group over two SSH hosts, data
parallel 2 (one rank per host; `--headless --data-parallel-start-rank 1` on the second),
started by `pdctl up`, answering completions through the leader, `down` leaving nothing.

Two placements: the loopback test hosts lo1/lo2, and two network namespaces of this test's
own (pdctl-mn1 10.77.31.2, pdctl-mn2 10.77.32.2, each with an sshd, routed to each other
through the root namespace), since the namespace hosts of tests/services.sh have no route
between them and a group's nodes must meet on the rendezvous port.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

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
from tests.helpers import wait_until
from tests.sshd import make_netns, need_root, reach_each_other, remove_netns, start_sshd
from tests.targets.testbed import SshEnv, pdctl, processes_in, write_spec

pytestmark = pytest.mark.e2e
PORT = 18780  # ports no other e2e file uses (test_top: 18740-18771)
RPC_PORT = 18781


NETNS = (("mn1", "10.77.31"), ("mn2", "10.77.32"))


@pytest.fixture(scope="module")
def routed_pair(ssh_env: SshEnv, tmp_path_factory):
    """Two SSH hosts in network namespaces of their own that route to each other."""
    need_root("ip")
    folder = tmp_path_factory.mktemp("netns")
    known = folder / "known_hosts"
    known.write_text(Path(ssh_env.known_hosts).read_text())
    servers, made = [], []
    try:
        for name, net in NETNS:
            ns = f"pdctl-{name}"
            address = make_netns(ns, net, route=True)
            made.append(ns)
            servers.append(start_sshd(ssh_env, folder, name, address, netns=ns))
            with known.open("a") as f:
                f.write(Path(servers[-1].known_hosts).read_text().splitlines()[-1] + "\n")
        reach_each_other(servers, made)
        yield SshEnv(tuple(s.host for s in servers), ssh_env.key, str(known))
    finally:
        for server in servers:
            server.stop()
        for ns in made:
            remove_netns(ns)


def group_spec(vllm_cpu, env: SshEnv, data: Path, names: tuple[str, str]) -> Path:
    return write_spec(data / "spec.yaml", phase0_spec(
        vllm_cpu, "e2emn", PORT, [host(env, vllm_cpu, data, n) for n in names],
        {"dataParallel": 2, "nodes": 2, "rendezvousPort": RPC_PORT},
    ))


@pytest.fixture(scope="module", params=["loopback", "netns"])
def group(request, vllm_cpu, ssh_env, tmp_path_factory):
    if request.param == "loopback":
        if not {"lo1", "lo2"} <= {h.name for h in ssh_env.hosts}:
            pytest.skip("needs the loopback test hosts lo1 and lo2")
        env, names = ssh_env, ("lo1", "lo2")
    else:
        env, names = request.getfixturevalue("routed_pair"), ("mn1", "mn2")
    data = tmp_path_factory.mktemp("multinode")
    spec = group_spec(vllm_cpu, env, data, names)
    result = up(spec, env)
    yield spec, data, result, env, names
    down(spec, *known(env))


def test_the_group_answers_completions_through_its_leader(group):
    spec, data, result, env, (first, second) = group
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"e2emn-serve-0 on {first}: healthy" in result.stdout
    assert f"e2emn-serve-0-node1 on {second}: running" in result.stdout
    urls = printed_urls(result.stdout)
    assert urls == [f"http://{env.host(first).address}:{PORT}/v1"], result.stdout
    for _ in range(2):
        answer = complete(urls[0])
        assert answer["usage"]["completion_tokens"] == 8
        # vLLM names the data-parallel size in the fingerprint (both ranks joined).
        assert "-dp2-" in answer["system_fingerprint"], answer["system_fingerprint"]


def test_status_and_logs_show_both_nodes(group):
    spec, data, result, env, (first, second) = group
    status = pdctl("status", str(spec), "-o", "json", *known(env))
    assert status.returncode == 0, status.stderr
    rows = {r["unit"]: r for r in json.loads(status.stdout)["instances"]}
    assert rows["e2emn-serve-0"]["health"] == "healthy"
    assert rows["e2emn-serve-0-node1"]["host"] == second
    assert rows["e2emn-serve-0-node1"]["pid"].isdigit()
    logs = pdctl("logs", str(spec), "e2emn-serve-0-node1", *known(env))
    assert "EngineCore_DP1" in logs.stdout, logs.stdout[-2000:]


def test_up_restarts_the_whole_group_when_a_worker_dies(group):
    """A headless node that dies cannot rejoin its running leader, and vLLM's leader does not
    exit when a headless rank dies: the leader's group guard stops it, so the group is seen
    stopped (not a leader that only looks alive), and `up` starts it again as one, answering
    with both ranks."""
    spec, data, result, env, (first, second) = group
    if first != "lo1":
        pytest.skip("once, on the loopback pair (a vLLM group restart costs minutes)")
    nodes = ((first, "e2emn-serve-0"), (second, "e2emn-serve-0-node1"))
    units = {n: data / h / "e2emn" / n for h, n in nodes}
    before = {n: int((u / "pid").read_text()) for n, u in units.items()}
    leader = units["e2emn-serve-0"]
    heard = "pdctl-guard: heard from e2emn-serve-0-node1"  # it acts only on a node it heard
    wait_until(lambda: heard in (leader / "log").read_text(), "the guard's contact", timeout=60)
    os.killpg(before["e2emn-serve-0-node1"], signal.SIGKILL)
    wait_until(lambda: not processes_in(leader), "the guard stops the leader", timeout=120)
    log = (leader / "log").read_text()
    assert "pdctl-guard: e2emn-serve-0-node1 (" in log and "has not answered for" in log, log
    plan = pdctl("up", str(spec), "--dry-run", *known(env))
    assert plan.stdout.count("not running") == 2, plan.stdout
    again = up(spec, env)
    assert again.returncode == 0, again.stdout + again.stderr
    after = {n: int((u / "pid").read_text()) for n, u in units.items()}
    assert all(after[n] != before[n] for n in units), (before, after, again.stdout)
    answer = complete(printed_urls(result.stdout)[0])
    assert "-dp2-" in answer["system_fingerprint"], answer["system_fingerprint"]


def test_down_leaves_nothing(group):
    spec, data, result, env, names = group
    down = pdctl("down", str(spec), *known(env))
    assert down.returncode == 0, down.stdout + down.stderr
    for name in names:
        assert_nothing_left(data / name, [PORT, RPC_PORT])
