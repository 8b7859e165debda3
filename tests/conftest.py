"""Shared test helpers: example specs, rendering, script checks, golden files."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import settings

from tests.helpers import run_cli  # noqa: F401 - the Docker SDK tests import it from here

# Fixtures that tests in several folders use: the SSH test bed's (ssh_env, fake_venv), the test
# dockerd's client and the sshd that reaches it (pytest reads pytest_plugins only here).
pytest_plugins = ["tests.targets.testbed", "tests.targets.docker.bed"]

# No per-example deadline for any hypothesis test (it is a timed assertion: speed belongs in
# benchmarks/). The default 200 ms fails a fast example that a loaded 2-core CI machine stalled
# once (DeadlineExceeded, or Flaky when the replay is fast); tests that need no deadline but
# say nothing about it get none either.
settings.register_profile("pdctl", deadline=None)
settings.load_profile("pdctl")

# A runner started in the background by a non-interactive shell (`cmd &`) ignores SIGINT, and
# every pdctl process a test starts would inherit that: the Ctrl-C tests would see pdctl run
# on. A handled signal is reset to its default in a child, so handle it here.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.yaml"))
K8S_VERSION = "1.29.0"
LEFT = pytest.StashKey["object"]()  # the leftovers.snapshot() taken when the session starts


# Under pytest-xdist (`-n 2 --dist loadgroup`: noxfile's ci) a module runs whole on one worker
# (module fixtures start once; its tests share names and fixed ports), and the modules of a
# SHARED group on one, handed out first: "dockerd" share dockerd's images (imported, pulled,
# counted); "xfer" both assert that no transfer agent and no /tmp/pdctl-xfer.* folder is left,
# which one module's running transfer would break for the other (CI, stop 53), and the real
# Mooncake transfer engines, which pick their ports in one range (15000-17000) at random.
SHARED = {"dockerd": "targets/docker/ top/test_docker.py offline/test_images.py "
          "render/test_host_scripts.py targets/hosts/test_port_owner.py",
          "xfer": "preflight/test_transfer.py preflight/test_transfer_netns.py "
                  "plan/test_mooncake_tcp_batch.py"}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if getattr(config.option, "loadgroup", False):  # an xdist worker's, with --dist loadgroup
        for item in items:
            module = item.nodeid.split("::")[0].removeprefix("tests/")
            item.add_marker(pytest.mark.xdist_group(next(
                (g for g, ms in SHARED.items() for m in ms.split() if module.startswith(m)),
                module)))
        items.sort(key=lambda i: i.get_closest_marker("xdist_group").args[0] not in SHARED)


GROUPS_LOST = pytest.StashKey[bool]()


def pytest_collection_finish(session: pytest.Session) -> None:
    """`--dist loadgroup` lost the groups when no id carries its `@group`: with a pytest whose
    node ids xdist cannot suffix (pytest-xdist issue 1386) a module's tests are spread over both
    workers, and tests sharing a module's fixtures and ports collide at random. Then every test
    fails at once saying so, rather than some of them now and then."""
    if getattr(session.config.option, "loadgroup", False) and session.items:
        session.config.stash[GROUPS_LOST] = not any("@" in i.nodeid for i in session.items)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.config.stash.get(GROUPS_LOST, False):
        pytest.fail("--dist loadgroup: no test id carries its `@group` (pytest-xdist issue "
                    "1386): install pytest<9.2 (pyproject.toml's test extra)", pytrace=False)


@pytest.hookimpl(optionalhook=True)  # xdist's: a worker starts with COLUMNS=80 and LINES=24,
def pytest_configure_node(node: Any) -> None:  # so it takes the controller's (wide tables)
    node.workerinput["term"] = {k: os.environ.get(k) for k in ("COLUMNS", "LINES")}


def pytest_configure(config: pytest.Config) -> None:
    for name, value in getattr(config, "workerinput", {}).get("term", {}).items():
        os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)


def pytest_sessionstart(session: pytest.Session) -> None:
    from tests import leftovers

    if not hasattr(session.config, "workerinput"):  # under xdist: the controller only
        session.config.stash[LEFT] = leftovers.snapshot()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a test left a process or a network namespace behind (tests/
    leftovers.py), naming each; then stop them so that the next run starts clean. Under xdist
    the controller checks once, after the workers (their basetemps are in its own)."""
    from tests import leftovers

    before = session.config.stash.get(LEFT, None)
    if before is None:
        return
    marks = [str(ROOT / "tests") + "/"]
    factory = getattr(session.config, "_tmp_path_factory", None)
    base = getattr(factory, "_basetemp", None)  # only when a test asked for a tmp_path
    if base is not None:
        marks.append(str(base))
    found = leftovers.processes(before, marks)
    made = leftovers.namespaces(before)
    if not found and not made:
        return
    lines = [str(p) for p in found] + [f"network namespace {n}" for n in made]
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "left behind by the tests (now stopped)", red=True)
        for line in lines:
            reporter.write_line(line)
    leftovers.stop(found)
    leftovers.remove(made)
    if session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden", action="store_true", help="Rewrite tests/golden/* from the renderer."
    )


@pytest.fixture
def update_golden(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-golden"))


def check_scripts(files: dict[str, str], tmp: Path) -> None:
    """bash -n and shellcheck (warnings and errors) over rendered scripts (the `.sh` files and
    those with a shebang; systemd unit files and drop-ins are not shell)."""
    paths = []
    for rel, text in files.items():
        if not (rel.endswith(".sh") or text.startswith("#!")):
            continue
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        paths.append(str(path))
    for path in paths:
        subprocess.run(["bash", "-n", path], check=True, capture_output=True, text=True)
    if shutil.which("shellcheck") is None:
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    result = subprocess.run(
        ["shellcheck", "-S", "warning", "-s", "bash", *paths], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback port that records whether anything connected to it: `accept()` raises
    BlockingIOError while nothing has."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        sock.setblocking(False)
        yield sock


def unreached_spec(tmp_path: Path, port: int, name: str, serve_port: int) -> Path:
    """A phase 0 spec whose one host is `port` on loopback (with a venv that does not exist),
    for commands that must refuse before they connect."""
    host = {"name": "h1", "address": "127.0.0.1", "port": port, "runtime": "venv"}
    host |= {"venv": "/nonexistent/venv", "dataDir": str(tmp_path / "data")}
    spec = {
        "name": name, "phase": 0, "model": {"name": "stand-in", "servedName": "stand-in"},
        "engine": {"device": "cpu"}, "hosts": [host], "serve": {"replicas": 1, "port": serve_port},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path
