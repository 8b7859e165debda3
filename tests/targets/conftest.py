"""Fixtures for target tests (see testbed.py)."""

from tests.targets.testbed import fake_venv, ssh_env  # noqa: F401
