"""group.memlock reads the limit where the engines will run (probe/group.py memlock_command): a
systemd unit's limit is systemd's, never limits.conf's, so preflight measures it in a transient
unit with the rendered units' LimitMEMLOCK=infinity and names that context and its fix."""

from __future__ import annotations

from pdctl.preflight.group import MEMLOCK, memlock_command, parse_memlock, parse_memlock_where
from pdctl.spec.model import Host
from tests.preflight.conftest import by_check
from tests.preflight.test_group import check, with_raw

RDMA = ", rdmaDevices: [mlx5_0]"


def test_the_context_line_is_read_and_named() -> None:
    text = "context a user unit of alice, its service manager's hard limit\n8192\n"
    assert parse_memlock(text) == 8192
    assert parse_memlock_where(text) == "a user unit of alice, its service manager's hard limit"
    assert parse_memlock_where("8192\n") == ""  # a recording from before the context line
    (b,) = by_check(check(with_raw({"b": {MEMLOCK: text}}), RDMA), "group.memlock")
    assert b.status == "FAIL"
    want = "ulimit -l: 8192 KiB (in a user unit of alice, its service manager's hard limit)"
    assert b.found == want
    assert "user@.service" in b.fix
    system = "context a system unit\nunlimited\n"
    (ok,) = by_check(check(with_raw({"b": {MEMLOCK: system}}), RDMA), "group.memlock")
    assert ok.status == "PASS" and ok.found == "ulimit -l: unlimited (in a system unit)"
    login = "context the login shell\n8192\n"
    (shell,) = by_check(check(with_raw({"b": {MEMLOCK: login}}), RDMA), "group.memlock")
    assert shell.found == "ulimit -l: 8192 KiB" and "limits.conf" in shell.fix


def test_systemd_hosts_are_measured_in_a_unit_nohup_hosts_in_the_login_shell() -> None:
    unit = memlock_command(Host(name="a", address="192.0.2.1", runtime="venv", venv="/v"))
    assert "systemd-run" in unit and "LimitMEMLOCK=infinity" in unit
    nohup = Host(name="a", address="192.0.2.1", runtime="venv", venv="/v", supervise="none")
    assert memlock_command(nohup) == "echo 'context the login shell'; ulimit -l"
