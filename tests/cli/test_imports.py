"""`pdctl --help`, `validate` and `render` must not import the heavy clients."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import ROOT
from tests.helpers import checked, environment, pdctl

HEAVY = ("paramiko", "docker", "kubernetes", "pynvml", "kubernetes_validate", "matplotlib")

PROBE = """
import sys
sys.argv = ["pdctl", *{argv!r}]
from pdctl.cli.app import main
try:
    main()
except SystemExit:
    pass
heavy = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r})
sys.stderr.write("HEAVY=" + ",".join(heavy) + "\\n")
"""


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"], ["validate", "examples/phase1-k8s.yaml"],
        ["render", "examples/phase1-k8s.yaml"], ["render", "examples/phase0-multihost.yaml"],
        ["schema"], ["init", "--phase", "1"],
    ],
    ids=lambda a: " ".join(a),
)
def test_light_commands_do_not_import_heavy_clients(argv: list[str]) -> None:
    code = PROBE.format(argv=argv, heavy=set(HEAVY))
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    line = [x for x in result.stderr.splitlines() if x.startswith("HEAVY=")][-1]
    assert line == "HEAVY=", f"{argv} imported {line[6:]}"


def test_every_command_help_works() -> None:
    from typer.main import get_command

    from pdctl.cli.app import app

    group = get_command(app)
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        assert command.help, f"command {name} has no help text"
        checked(pdctl(name, "--help"))


@pytest.mark.parametrize("command", ["validate", "render", "plan"])
def test_spec_commands_do_not_scan_pydantic_plugins(tmp_path, command: str) -> None:
    """Finding pydantic plugins reads every installed package's entry points (20-45 ms of a
    cold render): the spec's validators are built without them."""
    (tmp_path / "plugin_probe.py").write_text(
        "import sys\n"
        "sys.stderr.write('PLUGIN LOADED\\n')\n"
        "class Probe:\n"
        "    def new_schema_validator(self, *args, **kwargs):\n"
        "        return None, None, None\n"
        "plugin = Probe()\n"
    )
    info = tmp_path / "plugin_probe-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: plugin-probe\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[pydantic]\nprobe = plugin_probe:plugin\n")
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", "PYDANTIC_DISABLE_PLUGINS": None}
    probe = subprocess.run(
        [sys.executable, "-c", "import pydantic.plugin._loader as l; list(l.get_plugins())"],
        env=environment(env), capture_output=True, text=True, check=True,
    )
    assert "PLUGIN LOADED" in probe.stderr  # the probe plugin is found when pydantic looks
    # a process of its own: pydantic looks for plugins once a process
    result = checked(pdctl(command, "examples/phase1-k8s.yaml", env=env, subprocess=True))
    assert "PLUGIN LOADED" not in result.stderr
