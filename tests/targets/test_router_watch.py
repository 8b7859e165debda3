"""pdctl's router watch (pdctl/hostside/router_watch.py) as a process, with a stand-in Mooncake
bootstrap server whose answer the test sets and a stand-in router that records each start. The
real vllm-router and vLLM's own bootstrap server: tests/render/test_router_watch.py (e2e)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from pdctl.plan.router import WATCH_FILE
from tests.helpers import wait_until

WATCH = Path(__file__).resolve().parents[2] / "pdctl" / "hostside" / WATCH_FILE


class Bootstrap:
    """A stand-in bootstrap server: GET /query answers `doc` (None: HTTP 503)."""

    def __init__(self) -> None:
        self.doc: dict | None = None
        self.asked = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                doc = outer.doc
                outer.asked += 1
                body = json.dumps(doc).encode() if doc is not None else b"starting"
                self.send_response(200 if doc is not None else 503)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def engine(self, engine_id: str | None) -> None:
        """None: not answering (503); "": answering with no engine; else that engine id."""
        self.doc = None if engine_id is None else (
            {} if engine_id == "" else {"0": {"engine_id": engine_id, "worker_addr": {}}})

    def hold(self, engine_id: str | None) -> None:
        """Answer so until the watch has asked twice (a whole poll has seen it)."""
        self.engine(engine_id)
        then = self.asked
        wait_until(lambda: self.asked >= then + 2, "two polls of the watch", timeout=30)


@pytest.fixture
def boot() -> Iterator[Bootstrap]:
    server = Bootstrap()
    yield server
    server.server.shutdown()


def watch(boot: Bootstrap, tmp_path: Path, child: str) -> subprocess.Popen:
    """The watch over a stand-in router: a Python child that appends a line to starts.txt."""
    starts = tmp_path / "starts.txt"
    code = f"open({str(starts)!r}, 'a').write('start\\n'); {child}"
    return subprocess.Popen(
        [sys.executable, str(WATCH), "--bootstrap", boot.url, "--", sys.executable, "-c", code],
        stderr=(tmp_path / "watch.log").open("w"), text=True,
    )


def starts(tmp_path: Path) -> int:
    path = tmp_path / "starts.txt"
    return len(path.read_text().splitlines()) if path.exists() else 0


def test_a_prefill_named_anew_restarts_the_router_and_one_restarting_is_waited_for(
    boot: Bootstrap, tmp_path: Path,
):
    boot.engine("engine-a")
    proc = watch(boot, tmp_path, "import time; time.sleep(600)")
    log = tmp_path / "watch.log"
    try:
        wait_until(lambda: starts(tmp_path) == 1, "the router's start", lambda: proc.poll() is None)
        boot.hold(None)  # the prefill is down: not answering
        boot.hold("")  # it answers, naming no engine yet
        boot.hold("engine-a")  # back with the same id (a short outage): nothing to do
        boot.hold(None)
        assert starts(tmp_path) == 1, (tmp_path / "watch.log").read_text()
        boot.engine("engine-b")
        wait_until(lambda: starts(tmp_path) == 2, "the router's second start",
                   lambda: proc.poll() is None, detail=log.read_text)
        text = log.read_text()
        assert f"{boot.url} now answers dp 0: engine-b (was dp 0: engine-a)" in text, text
        assert text.count("a prefill came back as another Mooncake engine") == 1, text
    finally:
        proc.send_signal(signal.SIGTERM)
        status = proc.wait(30)
    assert status == 128 + signal.SIGTERM  # the stand-in router's status: SIGTERM ended it
    assert starts(tmp_path) == 2


def test_a_prefill_that_named_no_engine_at_the_start_restarts_the_router_once_it_does(
    boot: Bootstrap, tmp_path: Path,
):
    """vllm-router keeps no engine id of a prefill whose bootstrap server named none."""
    boot.engine("")
    proc = watch(boot, tmp_path, "import time; time.sleep(600)")
    try:
        wait_until(lambda: starts(tmp_path) == 1, "the router's start", lambda: proc.poll() is None)
        boot.engine("engine-a")
        wait_until(lambda: starts(tmp_path) == 2, "the router's second start",
                   lambda: proc.poll() is None, detail=(tmp_path / "watch.log").read_text)
        assert "(it named none at the router's start)" in (tmp_path / "watch.log").read_text()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)


@pytest.mark.parametrize(("child", "status"), [("raise SystemExit(3)", 3),
                                                ("raise SystemExit(0)", 75)])
def test_the_router_ending_by_itself_ends_the_watch_with_its_status(
    boot: Bootstrap, tmp_path: Path, child: str, status: int,
):
    """An exit nobody asked for with status 0 is a failure (75), so that Restart=on-failure
    restarts it too; any other status is passed on."""
    boot.engine("engine-a")
    proc = watch(boot, tmp_path, child)
    assert proc.wait(30) == status
    assert starts(tmp_path) == 1
