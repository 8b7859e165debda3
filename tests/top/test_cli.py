"""`pdctl top` from the command line: over a real SSH host (loopback sshd; /metrics served by
a local HTTP server replaying the recorded vLLM answers, reached through SSH port forwarding as
the engines are), the live dashboard left with Ctrl-C, and usage errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from rich.console import Console

from pdctl.top.dashboard import render
from pdctl.top.window import Figures, Window
from tests.helpers import checked, pdctl
from tests.targets.testbed import closed_port, host_entry, write_spec

DATA = Path(__file__).parent / "data"


class Replay(BaseHTTPRequestHandler):
    """First GET /metrics: the recording before the load; every later one: after it."""

    served = 0

    def do_GET(self) -> None:  # noqa: N802
        name = "phase0-before.prom" if type(self).served == 0 else "phase0-after.prom"
        type(self).served += 1
        body = (DATA / name).read_bytes()
        self.send_response(200 if self.path == "/metrics" else 404)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def engine():
    handler = type("R", (Replay,), {"served": 0})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()


def spec_on(ssh_env, tmp_path: Path, port: int, name: str = "topcli") -> Path:
    return write_spec(
        tmp_path / "spec.yaml",
        {
            "name": name, "phase": 0, "model": {"name": "org/tiny", "servedName": "tiny"},
            "hosts": [host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, gpus=[0])],
            "serve": {"port": port},
        },
    )


def top(spec: Path, ssh_env, *args: str, columns: str | None = "200"):
    """`pdctl top SPEC --once --window 1s ARGS` over the loopback sshd."""
    argv = ["top", str(spec), "--once", "--window", "1s", *args]
    return pdctl(*argv, "--known-hosts", ssh_env.known_hosts, env={"COLUMNS": columns})


def test_once_json_over_ssh_forwarding(ssh_env, engine, tmp_path):
    spec = spec_on(ssh_env, tmp_path, engine)
    res = top(spec, ssh_env, "-o", "json")
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    (inst,) = doc["instances"]
    assert (inst["name"], inst["where"], inst["error"]) == ("topcli-serve-0", "lo1", None)
    assert inst["requests"] == 4 and inst["totals"]["generation_tokens"] == 32
    assert doc["window_s"] >= 1.0
    assert doc["gpus"] == [] and doc["gpu_missing"][0].startswith("lo1: ")


def test_an_engine_that_does_not_answer_is_a_row_and_exit_1(ssh_env, tmp_path):
    port = closed_port()  # a port nobody listens on
    res = top(spec_on(ssh_env, tmp_path, port), ssh_env, "-o", "json")
    assert res.returncode == 1
    (inst,) = json.loads(res.stdout)["instances"]
    assert inst["error"].startswith("/metrics: no answer")
    assert res.stderr.startswith("error: topcli-serve-0: /metrics: no answer (nothing listens on")
    assert res.stderr.count("\n") == 1


def test_live_dashboard_leaves_cleanly_on_ctrl_c(ssh_env, engine, tmp_path):
    spec = spec_on(ssh_env, tmp_path, engine)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pdctl", "top", str(spec), "--refresh", "1s"]
        + ["--known-hosts", ssh_env.known_hosts],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, COLUMNS="200"),
    )
    seen = []
    for line in proc.stdout:  # until the first full frame is drawn
        seen.append(line)
        if line.startswith("keys: "):
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    text = "".join(seen) + out
    assert proc.returncode == 0, err
    assert "Traceback" not in err and err == ""
    assert "topcli-serve-0" in text and "keys: + / -" in text


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--window", "0s"], "--window: expected a duration from 1s to 1h"),
        (["--window", "soon"], "--window: expected a duration"),
        (["-o", "json"], "-o json prints one window: add --once"),
        (["--once", "-o", "yaml"], "--output must be table or json"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(tmp_path, args, message):
    spec = write_spec(
        tmp_path / "spec.yaml",
        {
            "name": "topcli", "phase": 0, "model": {"name": "org/tiny"},
            "hosts": [{"name": "h", "address": "192.0.2.1", "gpus": [0]}],
        },
    )
    res = checked(pdctl("top", str(spec), *args), 2)
    assert res.stderr.count("\n") == 1 and message in res.stderr, res.stderr


# `pdctl top --once`'s table into a pipe (review finding 17): as wide as it needs, like
# kubectl (was cut at 80 columns: names and headers ending in '…'); at 80 columns the instance
# name stays whole. Over the loopback sshd, with the recorded /metrics (tests/top/test_cli.py).
NAME = "top-deployment-with-a-long-name"


def test_once_table_keeps_names_and_headers(ssh_env, engine, tmp_path):
    spec = spec_on(ssh_env, tmp_path, engine, NAME)
    piped = top(spec, ssh_env, columns=None)
    assert piped.returncode == 0, piped.stderr
    assert "…" not in piped.stdout, piped.stdout
    for word in (f"{NAME}-serve-0", "TTFT p50/p95 ms", "ITL p50/p95 ms", "KV recv tok"):
        assert word in piped.stdout, piped.stdout
    narrow = top(spec, ssh_env, columns="80")
    assert narrow.returncode == 0, narrow.stderr
    assert f"{NAME}-serve-0" in narrow.stdout, narrow.stdout


# The dashboard of a window in which no instance answered says so: no `window 0s` title and
# no `nothing crossed a threshold` verdict, which read as if the deployment were judged fine.
def _text(w: Window) -> str:
    console = Console(width=200, record=True, color_system=None)
    console.print(render(w, []))
    return console.export_text()


def test_no_instance_answered_is_said_not_judged() -> None:
    down = Figures("d-serve-0", "serve", "lo1", error="connection refused")
    text = _text(Window("d", 0, "hosts", 0.0, (down,)))
    assert "d  phase 0 (hosts)  no instance answered" in text
    assert "window 0s" not in text
    assert "none: no instance answered /metrics, so nothing could be judged" in text
    assert "nothing crossed a threshold" not in text


def test_a_window_with_answers_and_no_verdict_says_nothing_crossed() -> None:
    up = Figures("d-serve-0", "serve", "lo1", seconds=30.0, running=0.0)
    text = _text(Window("d", 0, "hosts", 30.0, (up,)))
    assert "window 30s" in text
    assert "none: nothing crossed a threshold in this window" in text
