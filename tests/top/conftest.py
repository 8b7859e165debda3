"""Fixtures of the top tests: the SSH test hosts (tests/targets/testbed.py)."""

from tests.targets.testbed import ssh_env  # noqa: F401
