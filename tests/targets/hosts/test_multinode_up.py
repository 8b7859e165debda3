"""A multi-node group over real SSH hosts with the stand-in engine (fake_vllm.py), which
behaves like vLLM's native multi-node launch: the leader serves /health only once its
`--headless` node joined on the rendezvous port; a node that dies fails the group.

The two loopback test hosts (lo1 127.0.0.1, lo2 127.0.0.2) are used: the network-namespace
hosts of tests/services.sh have no route to each other, and a group's nodes must meet.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import checked, known
from tests.targets.testbed import (
    SshEnv,
    deployed,
    free_port,
    host_entry,
    pdctl,
    processes_in,
    stand_in_spec,
    status_rows,
    write_spec,
)


def group_spec(env: SshEnv, venv: Path, data: Path, **engine_env: str) -> Path:
    names = [h.name for h in env.hosts]
    if not {"lo1", "lo2"} <= set(names):
        pytest.skip("needs the loopback test hosts lo1 and lo2")
    hosts = [host_entry(env, env.host(n), data, venv=str(venv)) for n in ("lo1", "lo2")]
    serve = {"tensorParallel": 2, "nodes": 2, "port": free_port(), "rendezvousPort": free_port()}
    serve["guardPort"] = free_port()
    spec = stand_in_spec("group", hosts, serve, {"device": "cpu", "env": engine_env})
    return write_spec(data / "spec.yaml", spec)


def test_group_starts_reports_every_node_and_goes_down(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
) -> None:
    spec = group_spec(ssh_env, fake_venv, tmp_path)
    with deployed(spec, *known(ssh_env), timeout="120") as done:
        up = done["up"]
        assert "group-serve-0 on lo1: healthy" in up.stdout
        assert "group-serve-0-node1 on lo2: running" in up.stdout
        rows = status_rows(spec, *known(ssh_env), code=0)
        assert set(rows) == {"group-serve-0", "group-serve-0-node1"}
        assert rows["group-serve-0"]["health"] == "healthy"
        assert rows["group-serve-0"]["host"] == "lo1"
        assert rows["group-serve-0-node1"]["host"] == "lo2"
        assert all(r["pid"].isdigit() for r in rows.values())
        worker_log = pdctl("logs", str(spec), "group-serve-0-node1", *known(ssh_env))
        assert "headless node rank 1 joined 127.0.0.1:" in worker_log.stdout, worker_log.stdout
        leader_log = pdctl("logs", str(spec), "group-serve-0", *known(ssh_env))
        assert "rank 1 joined from" in leader_log.stdout, leader_log.stdout
    assert done["down"].returncode == 0, done["down"].stdout + done["down"].stderr
    assert processes_in(tmp_path) == []


def test_a_failing_worker_fails_the_group_and_stops_all_of_it(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
) -> None:
    spec = group_spec(ssh_env, fake_venv, tmp_path, FAKE_VLLM_FAIL_RANK="1")
    try:
        up = checked(pdctl("up", str(spec), "--yes", *known(ssh_env), "--timeout", "300"), 1)
        # The worker's own failure is reported (not the leader's timeout), with its log.
        assert "group-serve-0-node1 on host lo2 failed: the process exited" in up.stderr
        assert "NCCL error" in up.stderr
        assert "stopped what this run started: group-serve-0" in up.stderr
        assert processes_in(tmp_path) == []
    finally:
        pdctl("down", str(spec), *known(ssh_env))


def test_a_change_on_one_node_restarts_the_whole_group(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
) -> None:
    """vLLM's nodes cannot rejoin a running group (the stand-in's leader exits when a node
    leaves, as vLLM's does): a change to the worker alone replaces every node together."""
    import yaml

    spec = group_spec(ssh_env, fake_venv, tmp_path)
    with deployed(spec, *known(ssh_env), timeout="120"):

        def pids() -> dict[str, str]:
            return {unit: r["pid"] for unit, r in status_rows(spec, *known(ssh_env)).items()}

        before = pids()
        data = yaml.safe_load(spec.read_text())
        data["hosts"][1]["hfCache"] = str(tmp_path / "cache2")  # only lo2's node changes
        spec.write_text(yaml.safe_dump(data, sort_keys=False))
        again = checked(pdctl("up", str(spec), "--yes", *known(ssh_env), "--timeout", "120"))
        assert "replacing the group group-serve-0, group-serve-0-node1 together" in again.stdout
        rows = status_rows(spec, *known(ssh_env))
        assert rows["group-serve-0"]["health"] == "healthy", rows
        after = pids()
        assert all(after[u] != before[u] for u in before), (before, after)
        assert all(p.isdigit() for p in after.values())
    assert processes_in(tmp_path) == []


def test_keep_going_still_fails_and_stops_the_whole_group(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
) -> None:
    """--keep-going undoes only what failed: for a group that is every node, and the leader
    fails with its node instead of waiting out the timeout."""
    spec = group_spec(ssh_env, fake_venv, tmp_path, FAKE_VLLM_FAIL_RANK="1")
    try:
        up = pdctl("up", str(spec), "--yes", "--keep-going", *known(ssh_env), "--timeout", "120")
        assert up.returncode == 1, up.stdout + up.stderr
        out = up.stdout + up.stderr
        assert "a node of its group failed (group-serve-0-node1)" in out
        assert processes_in(tmp_path) == []
    finally:
        pdctl("down", str(spec), *known(ssh_env))


def test_a_node_that_dies_takes_its_group_down_and_up_starts_it_again(
    ssh_env: SshEnv, fake_venv: Path, tmp_path: Path
) -> None:
    """Hosts without systemd: when the worker dies, the leader's group guard stops the leader
    (the stand-in runs deaf, like vLLM, whose leader does not notice a dead headless node), so
    `status` shows the group stopped instead of a leader that only looks alive; `up` starts
    the group again."""
    import os
    import signal

    from tests.helpers import wait_until

    spec = group_spec(ssh_env, fake_venv, tmp_path, FAKE_VLLM_DEAF="1")
    leader_dir = tmp_path / "lo1" / "group" / "group-serve-0"
    worker_dir = tmp_path / "lo2" / "group" / "group-serve-0-node1"
    with deployed(spec, *known(ssh_env), timeout="120"):
        # The guard acts on a node it has heard from (never on one still starting): wait for
        # that first; vLLM's group takes far longer to form than the stand-in's.
        heard = "pdctl-guard: heard from group-serve-0-node1"
        wait_until(lambda: heard in (leader_dir / "log").read_text(), "the guard's contact")
        os.killpg(int((worker_dir / "pid").read_text()), signal.SIGKILL)
        wait_until(
            lambda: not processes_in(leader_dir), "the guard stops the leader", timeout=60,
            detail=lambda: (leader_dir / "log").read_text() + "\n".join(processes_in(leader_dir)),
        )
        rows = status_rows(spec, *known(ssh_env))
        assert {r["state"] for r in rows.values()} == {"stopped"}, rows
        log = (leader_dir / "log").read_text()
        assert "pdctl-guard: group-serve-0-node1 (127.0.0.2:" in log and "has not answered" in log
        again = checked(pdctl("up", str(spec), "--yes", *known(ssh_env), "--timeout", "120"))
        assert "group-serve-0 on lo1: healthy" in again.stdout
    assert processes_in(tmp_path) == []
