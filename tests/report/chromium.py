"""Open a file in headless Chromium over the DevTools protocol and report what the page did:
console errors and exceptions, every network request, how many <svg> it drew; a screenshot is
written beside it. Debian's `chromium` package (tests/services.sh installs it in CI)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BINARY = shutil.which("chromium") or shutil.which("chromium-browser")
DEADLINE_S = 120  # a hang guard, not a timing assertion


@dataclass
class Visit:
    errors: list[str] = field(default_factory=list)  # console errors, exceptions, Log errors
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    svgs: int = 0
    title: str = ""
    screenshot: Path | None = None


def _ws_url(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    for line in proc.stderr:
        m = re.search(r"DevTools listening on (ws://\S+)", line)
        if m:  # keep reading its stderr, or a full pipe would stall the browser
            threading.Thread(target=proc.stderr.read, daemon=True).start()
            return m.group(1)
    raise RuntimeError(f"chromium exited {proc.wait()} before its DevTools port was up")


class _Page:
    def __init__(self, url: str) -> None:
        import websocket

        self.ws = websocket.create_connection(url, timeout=DEADLINE_S, suppress_origin=True)
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self.ws.recv())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def wait_for(self, method: str) -> None:
        end = time.monotonic() + DEADLINE_S
        while not any(e.get("method") == method for e in self.events):
            if time.monotonic() > end:
                raise RuntimeError(f"no {method} within {DEADLINE_S} s")
            self.events.append(json.loads(self.ws.recv()))


def visit(page: Path, shot: Path) -> Visit:
    """Load `page` (file://) in a fresh headless Chromium; `shot`: the screenshot's path."""
    assert BINARY is not None
    profile = shot.parent / "chromium-profile"
    proc = subprocess.Popen(
        [BINARY, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--disable-default-apps", "--remote-debugging-port=0", f"--user-data-dir={profile}",
         "--window-size=1200,900", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        browser = _ws_url(proc)
        port = re.search(r":(\d+)/", browser).group(1)  # type: ignore[union-attr]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30) as r:
            targets = json.load(r)
        target = next(t for t in targets if t.get("type") == "page")
        tab = _Page(target["webSocketDebuggerUrl"])
        for domain in ("Runtime", "Log", "Network", "Page"):
            tab.call(f"{domain}.enable")
        url = page.resolve().as_uri()
        tab.call("Page.navigate", url=url)
        tab.wait_for("Page.loadEventFired")
        out = Visit()
        out.svgs = tab.call("Runtime.evaluate",
                            expression="document.querySelectorAll('svg').length")["result"]["value"]
        out.title = tab.call("Runtime.evaluate", expression="document.title")["result"]["value"]
        data = tab.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
        shot.write_bytes(base64.b64decode(data["data"]))
        out.screenshot = shot
        for e in tab.events:
            m, prm = e.get("method"), e.get("params", {})
            if m == "Runtime.consoleAPICalled" and prm.get("type") in ("error", "assert"):
                out.errors.append("console: " + " ".join(
                    str(a.get("value", a.get("description"))) for a in prm.get("args", [])))
            elif m == "Runtime.exceptionThrown":
                out.errors.append("exception: " + prm["exceptionDetails"].get("text", ""))
            elif m == "Log.entryAdded" and prm["entry"].get("level") == "error":
                out.errors.append("log: " + prm["entry"].get("text", ""))
            elif m == "Network.requestWillBeSent":
                out.requests.append(prm["request"]["url"])
        out.requests = [u for u in out.requests if u != url]  # the page itself
        tab.ws.close()
        return out
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
