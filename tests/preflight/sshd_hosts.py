"""The real sshd test hosts (tests/services.sh) that preflight tests gather from over SSH."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def sshd_hosts() -> dict[str, tuple[str, int]]:
    """Host name -> (address, port) from $PDCTL_TEST_SSH_HOSTS; the test is skipped when the
    hosts (or their key, $PDCTL_TEST_SSH_KEY) are not there."""
    path = os.environ.get("PDCTL_TEST_SSH_HOSTS")
    if not path or not Path(path).exists() or not os.environ.get("PDCTL_TEST_SSH_KEY"):
        pytest.skip("no sshd test hosts: run tests/services.sh start and source $RUN/env")
    out = {}
    for line in Path(path).read_text().splitlines():
        name, addr, port = line.split()
        out[name] = (addr, int(port))
    return out
