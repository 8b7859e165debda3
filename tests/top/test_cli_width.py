"""`pdctl top --once`'s table into a pipe (review finding 17): as wide as it needs, like
kubectl (was cut at 80 columns: names and headers ending in '…'); at 80 columns the instance
name stays whole. Over the loopback sshd, with the recorded /metrics (tests/top/test_cli.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers import pdctl
from tests.targets.testbed import host_entry, write_spec
from tests.top.test_cli import engine  # noqa: F401 - the fixture

NAME = "top-deployment-with-a-long-name"


def _top(spec: Path, known_hosts: str, columns: str | None) -> subprocess.CompletedProcess:
    argv = ["top", str(spec), "--once", "--window", "1s", "--known-hosts", known_hosts]
    return pdctl(*argv, env={"COLUMNS": columns})


def test_once_table_keeps_names_and_headers(ssh_env, engine, tmp_path):  # noqa: F811
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "name": NAME,
            "phase": 0,
            "model": {"name": "org/tiny", "servedName": "tiny"},
            "hosts": [host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, gpus=[0])],
            "serve": {"port": engine},
        },
    )
    piped = _top(spec, ssh_env.known_hosts, None)
    assert piped.returncode == 0, piped.stderr
    assert "…" not in piped.stdout, piped.stdout
    for word in (f"{NAME}-serve-0", "TTFT p50/p95 ms", "ITL p50/p95 ms", "KV recv tok"):
        assert word in piped.stdout, piped.stdout
    narrow = _top(spec, ssh_env.known_hosts, "80")
    assert narrow.returncode == 0, narrow.stderr
    assert f"{NAME}-serve-0" in narrow.stdout, narrow.stdout
