"""The one-line errors and failure reports of `up` (review of 2026-12-01):

- log text quoted in an error or stage line carries no escape sequence or control character
  (a vllm-router log line's colour codes came out as '\x1b[2m...' in the error line);
- a tool's "Run 'docker run --help' for more information" hint is never the quoted cause;
- a health probe whose SSH port forward is refused says that nothing listens on the port
  (it said 'no answer (ChannelException)');
- a full dataDir names the folder and the cause (SFTP said only 'Failure'), and no "stopped
  what this run started: -" line follows when nothing was started.

Over the real sshd host lo1 where a host is involved; the full dataDir is a real 1 MiB tmpfs
(mounted by the test, which runs as root, as the test services do)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from pdctl.cli.progress import report_failures, report_undo
from pdctl.render.host_scripts import host_scripts
from pdctl.targets.health import probe
from pdctl.targets.hosts.remote import HostOps
from pdctl.targets.outcome import Outcome, UnitFailure, UpFailed, last_line
from pdctl.targets.stages import latest_line, printable
from tests.helpers import checked
from tests.targets.testbed import (
    SshEnv,
    closed_port,
    connect,
    free_port,
    host_entry,
    lo1_spec,
    pdctl,
    stand_in_spec,
    write_spec,
)

# A vllm-router log line as it writes it (tracing's colours), then a progress bar's rewrite,
# a window title (OSC ... BEL), a bell and a backspace.
ROUTER_LOG = (
    "\x1b[2m2026-12-01T14:00:37.120Z\x1b[0m \x1b[31mERROR\x1b[0m \x1b[2mvllm_router\x1b[0m"
    "\x1b[2m:\x1b[0m worker http://10.0.0.2:8200 is not healthy\n"
    "Loading: 10%\rLoading: 100%\x1b]0;vllm\x07 done\x07\x08\n"
)
CONTROL = [chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))]


def clean(text: str) -> bool:
    return not any(c in text for c in CONTROL) and "\\x1b" not in text and "\\x07" not in text


def test_quoted_log_text_has_no_escapes_or_control_characters() -> None:
    failure = UnitFailure("lo1", "r-router", "not healthy after 5 s", ROUTER_LOG)
    line = UpFailed(Outcome(failures=[failure])).line()
    assert clean(line), line
    assert line.endswith("its log ends: Loading: 100% done; nothing had been changed"), line
    assert latest_line(ROUTER_LOG) == "Loading: 100% done"
    first = ROUTER_LOG.splitlines()[0]
    assert printable(first) == (
        "2026-12-01T14:00:37.120Z ERROR vllm_router: worker http://10.0.0.2:8200 is not healthy"
    )
    out = io.StringIO()
    report_failures(Console(file=out, width=200, color_system=None), [failure])
    assert clean(out.getvalue()), repr(out.getvalue())
    assert "  | 2026-12-01T14:00:37.120Z ERROR vllm_router: worker" in out.getvalue()


def test_a_help_hint_is_not_the_quoted_cause() -> None:
    # docker run's own output (docker CLI 26): the cause, then the pointer to its help.
    conflict = 'docker: Error response from daemon: Conflict. The container name "/x" is already '
    conflict += "in use."
    assert last_line(conflict + "\nSee 'docker run --help'.\n") == conflict
    invalid = "docker: invalid reference format."
    assert last_line(invalid + "\nRun 'docker run --help' for more information\n") == invalid


def test_a_docker_host_start_failure_quotes_dockers_cause(ssh_env: SshEnv, tmp_path: Path) -> None:
    """runtime: docker on lo1, whose SSH sessions reach no Docker daemon (or, where one is
    reached, lack the image): docker run prints the cause, then its help hint."""
    if shutil.which("docker") is None:
        pytest.skip("needs the docker CLI on the test host (this machine)")
    engine = {"device": "cpu", "image": "pdctl-test/absent:1", "version": "0.33.0"}
    spec = lo1_spec(ssh_env, tmp_path, "dkhint", engine=engine, host={"runtime": "docker"})
    up = pdctl("up", str(spec), "--yes", "--timeout", "30", "--known-hosts", ssh_env.known_hosts)
    assert up.returncode == 1, up.stdout + up.stderr
    headline = next(x for x in up.stdout.splitlines() if x.startswith("FAILED dkhint-serve-0"))
    assert "start script failed: " in headline, up.stdout
    assert "--help'" not in headline, up.stdout
    assert "--help'" not in up.stderr, up.stderr
    assert "docker" in headline.split("start script failed: ")[1].lower(), up.stdout


def test_a_refused_port_forward_says_nothing_listens(ssh_env: SshEnv, tmp_path: Path) -> None:
    port = free_port(1)  # nothing listens there
    conn = connect(ssh_env)
    try:
        opener = lambda: conn.open_channel(port, "127.0.0.1")  # noqa: E731
        named = probe(opener, "m", where=f"127.0.0.1:{port}")
        unnamed = probe(opener, "m")
        # what up and status probe through: the host's HostOps names the address and port
        ops = HostOps(conn, str(tmp_path / "deploy"), host_scripts())
        through_ops = ops.probe(port, "m")
    finally:
        conn.close()
    assert not named.ok and named.detail == f"no answer (nothing listens on 127.0.0.1:{port})"
    assert unnamed.detail == "no answer (nothing listens on its port)"
    assert through_ops.detail == f"no answer (nothing listens on 127.0.0.1:{port})"


def test_report_undo_is_silent_when_nothing_was_started() -> None:
    out = io.StringIO()
    report_undo(Console(file=out, width=200, color_system=None), Outcome())
    assert out.getvalue() == ""
    report_undo(Console(file=out, width=200, color_system=None), Outcome(stopped=["a", "b"]))
    assert out.getvalue() == "stopped what this run started: a, b\n"


@pytest.fixture
def full_tmpfs(tmp_path: Path):
    """A 1 MiB tmpfs, filled up."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root (the test services run as root)")
    where = tmp_path / "full"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], check=True)
    try:
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={where / 'filler'}", "bs=64k", "count=64"],
            capture_output=True,
        )  # exits 1 once the filesystem is full: that is the point
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def test_a_full_data_dir_is_named_with_its_cause(
    ssh_env: SshEnv, fake_venv: Path, full_tmpfs: Path, tmp_path: Path
) -> None:
    key = {"apiKey": {"env": "PDCTL_TEST_API_KEY"}}  # `up` writes secrets.env first: it fails
    entry = host_entry(ssh_env, ssh_env.host("lo1"), full_tmpfs, venv=str(fake_venv))
    serve = {"replicas": 1, "port": free_port()}
    spec = write_spec(tmp_path / "spec.yaml", stand_in_spec("fulldd", [entry], serve, secrets=key))
    known = ["--known-hosts", ssh_env.known_hosts]
    up = checked(pdctl("up", str(spec), "--yes", *known, env={"PDCTL_TEST_API_KEY": "sk-test"}), 1)
    folder = f"{entry['dataDir']}/fulldd"
    assert f"cannot write {folder}: No space left on device" in up.stderr, up.stderr
    assert "stopped what this run started" not in up.stdout, up.stdout
    assert len(up.stderr.strip().splitlines()) == 1, up.stderr


# `pdctl up` when a host cannot be reached: one line naming the host, its address and the
# cause (exit 1, no traceback); `--dry-run --offline` shows the plan without connecting.
def spec_for(tmp_path: Path, port: int) -> Path:
    host = {"name": "gpu-a", "address": "127.0.0.1", "port": port, "gpus": [0]}
    host["dataDir"] = str(tmp_path / "data")
    spec = {"name": "u", "phase": 0, "model": {"name": "Qwen/Qwen2.5-0.5B-Instruct"}}
    return write_spec(tmp_path / "spec.yaml", {**spec, "hosts": [host], "serve": {"port": 8000}})


def test_unreachable_host_is_one_line_naming_host_address_and_cause(tmp_path: Path):
    port = closed_port()
    for extra in (["--dry-run"], ["--yes"]):
        proc = checked(pdctl("up", str(spec_for(tmp_path, port)), *extra), 1)
        assert "Traceback" not in proc.stderr
        (line,) = proc.stderr.strip().splitlines()
        assert line.startswith(f"error: host gpu-a (127.0.0.1:{port}): cannot connect: "), line
        assert "--dry-run --offline" in line


def test_dry_run_offline_shows_the_plan_without_connecting(tmp_path: Path):
    proc = checked(pdctl("up", str(spec_for(tmp_path, closed_port())), "--dry-run", "--offline"))
    assert "u-serve-0" in proc.stdout and "start" in proc.stdout
    assert "not contacted" in proc.stdout
    assert not (tmp_path / "data").exists()


def test_offline_without_dry_run_is_a_usage_error(tmp_path: Path):
    proc = checked(pdctl("up", str(spec_for(tmp_path, closed_port())), "--offline"), 2)
    assert proc.stderr.strip() == "error: --offline works only with --dry-run; add --dry-run"


@pytest.mark.parametrize("where", ["kubernetes", "docker"])
def test_keep_going_off_ssh_hosts_is_a_usage_error_before_connecting(tmp_path: Path, where: str):
    """--keep-going undoes only the failed instances on SSH hosts; the Docker engine target
    undoes a failed run whole and Kubernetes undoes nothing, so it is refused there at once."""
    port = closed_port()
    extra = (
        ["--phase", "1", "--target", "kubernetes"]
        if where == "kubernetes"
        else ["--docker-url", f"gpu-a=tcp://127.0.0.1:{port}"]
    )
    proc = checked(pdctl("up", str(spec_for(tmp_path, port)), "--keep-going", "--yes", *extra), 2)
    (line,) = proc.stderr.strip().splitlines()
    shown = "Kubernetes" if where == "kubernetes" else "--docker-url"
    assert line.startswith(f"error: --keep-going works on SSH hosts only: with {shown} "), line
    assert line.endswith("; leave out --keep-going"), line
