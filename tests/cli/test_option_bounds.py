"""Numeric options of the commands that connect are checked before anything connects: a
zero or negative --timeout, --lines, --parallel or --connect-timeout is one line, exit 2, and
no host is contacted (review finding 3: `up --timeout -5` started the engine, then failed)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from typer.core import TyperOption

from pdctl.cli.app import command
from pdctl.cli.metavars import type_metavar
from tests.conftest import unreached_spec
from tests.helpers import checked
from tests.targets.testbed import pdctl

CONNECTING = ("up", "down", "status", "logs", "top", "preflight")


def numeric_options() -> list[tuple[str, str]]:
    """(command, --option) for every int or float option of the commands that connect."""
    root = command()
    out = []
    for name in CONNECTING:
        for param in root.commands[name].params:
            if not isinstance(param, TyperOption) or param.hidden or param.is_flag:
                continue
            if type_metavar(param) in ("INTEGER", "FLOAT"):
                out.append((name, max(param.opts, key=len)))
    return out


def _spec(tmp_path: Path, port: int) -> Path:
    return unreached_spec(tmp_path, port, "bounds", 18999)


def test_the_connecting_commands_have_numeric_options() -> None:
    found = set(numeric_options())
    assert {("up", "--timeout"), ("logs", "--lines"), ("up", "--parallel")} <= found


@pytest.mark.parametrize(("cmd", "option"), numeric_options())
def test_a_negative_numeric_option_is_refused_before_connecting(
    tmp_path: Path, listener: socket.socket, cmd: str, option: str
) -> None:
    spec = _spec(tmp_path, listener.getsockname()[1])
    extra = ["--yes"] if cmd == "up" else ["--once"] if cmd == "top" else []
    out = checked(pdctl(cmd, str(spec), option, "-1", *extra, timeout=60), 2)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and option in lines[0], out.stderr
    with pytest.raises(BlockingIOError):
        listener.accept()  # nobody connected


@pytest.mark.parametrize("option", ["--timeout", "--parallel", "--connect-timeout"])
def test_zero_is_refused_where_it_makes_no_sense(
    tmp_path: Path, listener: socket.socket, option: str
) -> None:
    spec = _spec(tmp_path, listener.getsockname()[1])
    out = checked(pdctl("up", str(spec), option, "0", "--yes", timeout=60), 2)
    assert out.stderr.startswith(f"error: Invalid value for '{option}'"), out.stderr
    with pytest.raises(BlockingIOError):
        listener.accept()
