"""CLI conventions users bring from kubectl, helm and typer (issue 17): `-o` is the format
everywhere (render yaml|json, `--output-dir` for files), `-h`, `--debug` anywhere, plain
metavars, shell completion, NO_COLOR / TERM=dumb / COLUMNS, and counts that agree."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.main import get_command

from pdctl.cli.app import app, command
from tests import helpers
from tests.conftest import EXAMPLES, ROOT
from tests.helpers import checked, cli, run_cli, written
from tests.pty_run import on_a_pty
from tests.targets.testbed import closed_port

ESC = "\x1b"
LIVE = ROOT / "tests" / "fixtures" / "gpu" / "h200x2-live"
PHASE1 = str(ROOT / "examples" / "phase1-k8s.yaml")
MOONCAKE = str(ROOT / "examples" / "phase2-mooncake-tcp.yaml")


def pdctl(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The real CLI without NO_COLOR and COLUMNS unless `env` sets them."""
    return helpers.pdctl(*args, env={"NO_COLOR": None, "COLUMNS": None, **(env or {})})


def on_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run pdctl with stdout and stderr on a pseudo-terminal: (exit code, what it showed)."""
    full = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "TERM", "COLUMNS")}
    full.update(env)
    return on_a_pty(args, full)


# -- -o is the format ----------------------------------------------------------------------
def test_render_json_on_kubernetes_is_a_v1_list_of_the_yaml_objects() -> None:
    as_json = pdctl("render", PHASE1, "-o", "json")
    as_yaml = pdctl("render", PHASE1)
    assert as_json.returncode == 0, as_json.stderr
    doc = json.loads(as_json.stdout)
    assert doc["apiVersion"] == "v1" and doc["kind"] == "List"
    documents = [d for d in yaml.safe_load_all(as_yaml.stdout) if d]
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(doc["items"], key=key) == sorted(documents, key=key)
    assert [o["kind"] for o in doc["items"]][0] == "Namespace"  # apply order


def test_render_json_for_hosts_is_the_bundle_as_data() -> None:
    proc = checked(pdctl("render", MOONCAKE, "-o", "json"))
    doc = json.loads(proc.stdout)
    stream = pdctl("render", MOONCAKE).stdout
    files = {f["path"]: f for f in doc["files"]}
    assert set(files) == set(re.findall(r"^#### (\S+)$", stream, re.M))
    for path, f in files.items():
        assert f"#### {path}\n{f['text']}" in stream
    roles = [u["role"] for u in doc["units"]]
    assert roles.count("router") == 1 and "prefill" in roles and "decode" in roles
    for unit in doc["units"]:
        assert unit["files"] and set(unit["files"]) <= set(files)
        assert files[unit["files"][0]]["executable"]  # start.sh first


def test_render_o_a_folder_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "json-or-folder"
    proc = pdctl("render", PHASE1, "-o", str(folder))
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "-o/--output is the format" in proc.stderr and "--output-dir" in proc.stderr
    assert not folder.exists()
    both = pdctl("render", PHASE1, "-o", "json", "--output-dir", str(folder))
    assert both.returncode == 2 and not folder.exists(), both.stderr


def test_render_output_dir_writes_the_bundle(tmp_path, capsys) -> None:
    out, err = cli(["render", PHASE1, "--output-dir", str(tmp_path / "b")])
    assert out == "" and "wrote 4 files" in err
    assert (tmp_path / "b" / "03-deployment-llama3-8b-serve.yaml").is_file()


def test_validate_json_summary_and_a_bad_spec_still_exits_2(tmp_path: Path) -> None:
    proc = checked(pdctl("validate", MOONCAKE, "-o", "json"))
    doc = json.loads(proc.stdout)
    assert doc["valid"] is True and doc["target"] == "hosts"
    assert doc["units"][-1].endswith("-router")
    bad = written(tmp_path / "bad.yaml", "name: x\nphase: 0\nmodel: {name: m}\nhostz: []\n")
    proc = pdctl("validate", str(bad), "-o", "json")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"error: {bad}:4: hostz: ")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_validate_counts_what_up_dry_run_lists(example: Path, capsys) -> None:
    out, err = cli(["up", str(example), "--dry-run", "--offline", "-o", "json"])
    changes = json.loads(out)["changes"]
    out, err = cli(["validate", str(example)])
    word = (
        "object"
        if json.loads(run_cli(["validate", str(example), "-o", "json"], capsys)[1]).get("objects")
        else "unit"
    )
    n = len(changes)
    assert f", {n} {word}{'' if n == 1 else 's'} planned " in out, out


def test_up_json_needs_a_dry_run(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(["up", MOONCAKE, "-o", "json"], capsys)
    assert code == 2 and out == "" and "add --dry-run" in err
    code, out, err = run_cli(["up", MOONCAKE, "--dry-run", "--offline", "-o", "json"], capsys)
    doc = json.loads(out)
    assert doc["compared"] is False
    assert {c["action"] for c in doc["changes"]} == {"start"}


# -- -h, --debug, metavars --------------------------------------------------------------------
def commands() -> list[str]:
    return sorted(get_command(app).commands)  # type: ignore[attr-defined]


@pytest.mark.parametrize("name", ["", *commands()])
def test_h_is_help_and_metavars_read_plain(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = [name] if name else []
    long_help, _ = cli([*argv, "--help"])
    short_help, err = cli([*argv, "-h"])
    assert short_help == long_help
    assert "-h, --help" in short_help
    usage_and_options = short_help.split("\n\n", 1)[0] + "".join(
        line.split("  ")[1] if line.startswith("  -") else "" for line in short_help.splitlines()
    )
    for typer_style in ("{", "<", "list[", " range", "<str>", "<path>"):
        assert typer_style not in usage_and_options, (typer_style, short_help)


def test_help_metavars_name_what_to_give(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_cli(["render", "-h"], capsys)
    assert "Usage: pdctl render [OPTIONS] SPEC\n" in out
    assert "-o, --output FORMAT" in out and "--output-dir DIR" in out
    _, out, _ = run_cli(["logs", "-h"], capsys)
    assert "SPEC [UNIT]" in out and "-n, --lines INTEGER" in out
    _, out, _ = run_cli(["preflight", "-h"], capsys)
    assert "--record DIR" in out and "-i, --identity FILE" in out


def test_debug_is_taken_after_the_command(tmp_path: Path) -> None:
    ok = pdctl("render", PHASE1, "--debug")
    assert ok.returncode == 0 and ok.stdout == pdctl("render", PHASE1).stdout
    bad = written(tmp_path / "bad.yaml", "name: x\nphase: 7\n")
    plain = pdctl("render", str(bad))
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    for argv in (["--debug", "render", str(bad)], ["render", str(bad), "--debug"]):
        traced = pdctl(*argv)
        assert traced.returncode != 0 and "Traceback" in traced.stderr, argv


# -- shell completion -----------------------------------------------------------------------
def complete(shell: str, words: str, cword: int) -> subprocess.CompletedProcess:
    env = {"_PDCTL_COMPLETE": f"complete_{shell}"}
    if shell == "bash":
        env.update(COMP_WORDS=words, COMP_CWORD=str(cword))
    else:  # what typer's zsh and fish scripts set
        env.update(_TYPER_COMPLETE_ARGS=words, _TYPER_COMPLETE_FISH_ACTION="get-args")
    return pdctl(env=env)


def test_logs_completes_the_units_of_the_spec() -> None:
    proc = complete("bash", f"pdctl logs {MOONCAKE} ", 3)
    assert proc.returncode == 0, proc.stderr
    names = ["prefill-0", "prefill-1", "decode-0", "decode-1", "router"]
    assert sorted(proc.stdout.split()) == sorted(f"qwen-mooncake-{n}" for n in names)
    assert proc.stdout.split()[-1] == "qwen-mooncake-router"  # in start order
    prefix = complete("bash", f"pdctl logs {MOONCAKE} qwen-mooncake-d", 3)
    assert prefix.stdout.split() == ["qwen-mooncake-decode-0", "qwen-mooncake-decode-1"]
    kube = complete("bash", f"pdctl logs {PHASE1} ", 3)
    assert kube.stdout.split() == ["llama3-8b-serve"]
    zsh = complete("zsh", f"pdctl logs {MOONCAKE} qwen-mooncake-r", 3)
    assert "qwen-mooncake-router" in zsh.stdout
    fish = complete("fish", f"pdctl logs {MOONCAKE} qwen-mooncake-r", 3)
    assert "qwen-mooncake-router" in fish.stdout
    missing = complete("bash", "pdctl logs no-such-spec.yaml ", 3)
    assert missing.returncode == 0 and missing.stdout.strip() == ""
    cmds = complete("bash", "pdctl lo", 1)
    assert cmds.stdout.split() == ["logs"]


def test_completion_plans_without_a_heavy_client() -> None:
    probe = (
        "import os, sys\n"
        "os.environ.update(_PDCTL_COMPLETE='complete_bash', COMP_CWORD='3',\n"
        f"    COMP_WORDS='pdctl logs {MOONCAKE} ')\n"
        "sys.argv = ['pdctl']\n"
        "from pdctl.cli.entry import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "heavy = [m for m in ('paramiko', 'docker', 'kubernetes') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert "qwen-mooncake-router" in proc.stdout, proc.stderr
    assert "HEAVY []" in proc.stdout


def test_install_and_show_completion_are_offered() -> None:
    help_text = pdctl("--help").stdout
    assert "--install-completion" in help_text and "--show-completion" in help_text
    script = pdctl("--show-completion", env={"SHELL": "/bin/bash"})
    assert script.returncode == 0 and "_PDCTL_COMPLETE" in script.stdout


# -- NO_COLOR, TERM=dumb, COLUMNS -----------------------------------------------------------
STYLED = [
    ["plan", MOONCAKE], ["preflight", str(LIVE / "spec.yaml"), "--replay", str(LIVE)],
    ["up", MOONCAKE, "--dry-run", "--offline"],
]


@pytest.mark.parametrize("argv", STYLED, ids=lambda a: a[0])
def test_no_color_and_dumb_terminal_give_no_escapes(argv: list[str]) -> None:
    code, shown = on_a_terminal(argv, {"TERM": "xterm-256color"})
    assert ESC in shown, shown  # styled on a terminal: the test can see escapes
    for env in ({"TERM": "xterm-256color", "NO_COLOR": "1"}, {"TERM": "dumb"}):
        plain_code, plain = on_a_terminal(argv, env)
        assert plain_code == code
        assert ESC not in plain, (env, plain)
        assert re.sub(r"\s+", "", plain)  # the same text, unstyled


def test_errors_and_help_on_a_terminal_have_no_escapes() -> None:
    for argv in (["render", "no-such.yaml"], ["render", "-h"], ["nope"]):
        _, shown = on_a_terminal(argv, {"TERM": "xterm-256color", "NO_COLOR": "1"})
        assert shown and ESC not in shown, shown


@pytest.mark.parametrize("argv", [["plan", MOONCAKE], STYLED[1]], ids=["plan", "preflight"])
def test_piped_tables_honour_columns(argv: list[str]) -> None:
    for width in (60, 150):
        proc = pdctl(*argv, env={"COLUMNS": str(width)})
        lines = proc.stdout.splitlines()
        assert lines and max(len(line) for line in lines) <= width, proc.stdout
        assert ESC not in proc.stdout
    narrow = pdctl(*argv, env={"COLUMNS": "60"}).stdout
    wide = pdctl(*argv, env={"COLUMNS": "150"}).stdout
    assert max(map(len, narrow.splitlines())) < max(map(len, wide.splitlines()))


def _long_names(tmp_path: Path) -> tuple[Path, list[str]]:
    """A spec whose hosts refuse connections (status lists them unreachable, exit 1) and
    whose units, hosts and URLs are long: (the spec, the unit names and URLs)."""
    port = closed_port()  # a loopback port nobody listens on
    hosts = [
        {"name": f"host-with-a-long-name-{i}", "address": f"127.0.0.{i}", "port": port}
        | {"runtime": "venv", "venv": "/nonexistent", "dataDir": str(tmp_path / f"d{i}")}
        for i in (1, 2)
    ]
    spec = {
        "name": "rvw-long-deployment", "phase": 0,
        "model": {"name": "stand-in", "servedName": "stand-in"}, "engine": {"device": "cpu"},
        "hosts": hosts, "serve": {"replicas": 2, "port": 18737},
    }
    path = written(tmp_path / "spec.yaml", yaml.safe_dump(spec))
    keys = ["rvw-long-deployment-serve-0", "rvw-long-deployment-serve-1"]
    return path, keys + ["http://127.0.0.1:18737", "http://127.0.0.2:18737"]


def test_piped_tables_are_as_wide_as_they_need(tmp_path: Path) -> None:
    """Like kubectl: a table into a pipe is not cut at 80 columns (review finding 17)."""
    spec, keys = _long_names(tmp_path)
    status = pdctl("status", str(spec))
    dry = pdctl("up", str(spec), "--dry-run", "--offline")
    assert status.returncode == 1 and dry.returncode == 0, (status, dry)
    for out in (status.stdout, dry.stdout):
        assert "…" not in out, out
        for word in ("host-with-a-long-name-1", "host-with-a-long-name-2", *keys[:2]):
            assert word in out, out
    for key in keys[2:]:
        assert key in status.stdout, status.stdout
    for argv in (["plan", MOONCAKE], STYLED[1]):
        assert "…" not in pdctl(*argv).stdout


def test_a_narrow_table_cuts_other_columns_not_units_or_urls(tmp_path: Path) -> None:
    """At 80 columns (a terminal, or COLUMNS=80 into a pipe) the unit names and URLs stay
    whole; the host, health and state columns give way."""
    spec, keys = _long_names(tmp_path)
    piped = pdctl("status", str(spec), env={"COLUMNS": "80"}).stdout
    _, shown = on_a_terminal(["status", str(spec)], {"NO_COLOR": "1"})
    for out in (piped, shown):
        table = [line for line in out.splitlines() if line.startswith("│")]
        assert table and max(len(line) for line in table) <= 80, out
        for key in keys:
            assert key in out, out
        assert "…" in out  # something else was cut


# -- options and environment variables agree ------------------------------------------------
CONNECTING = ("up", "down", "status", "logs", "top", "preflight", "restart")


def test_connecting_commands_take_the_same_identity_and_variables() -> None:
    tree = command().commands
    for name in CONNECTING:
        params = {p.name: p for p in tree[name].params}
        assert "-i" in params["identity"].opts, name
        envvars = {p.envvar for p in params.values() if isinstance(p.envvar, str)}
        assert {"PDCTL_KNOWN_HOSTS", "PDCTL_SSH_IDENTITY"} <= envvars, name


def test_every_pdctl_variable_is_documented() -> None:
    found = set()
    for cmd in command().commands.values():
        found |= {p.envvar for p in cmd.params if isinstance(p.envvar, str)}
    for path in (ROOT / "pdctl").rglob("*.py"):
        found |= set(re.findall(r"\b_?PDCTL_[A-Z_]+[A-Z]", path.read_text()))
    page = (ROOT / "docs" / "environment.md").read_text()
    assert "PDCTL_KNOWN_HOSTS" in found and "_PDCTL_COMPLETE" in found
    for name in sorted(found - {"PDCTL_TEST_"}):
        assert f"`{name}`" in page, name
    assert "(environment.md)" in (ROOT / "docs" / "README.md").read_text()
