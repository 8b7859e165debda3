"""Shared test helpers: example specs, rendering, script checks, golden files."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from hypothesis import settings

from tests.helpers import run_cli  # noqa: F401 - the Docker SDK tests import it from here

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


# Under pytest-xdist (`pytest -n 2 --dist loadgroup`, as noxfile's `ci` runs the unit suite)
# each module runs whole on one worker: its module fixtures start once, and its tests share
# names (deployments, containers) and fixed ports with each other. The modules of one line
# below share a resource of the test services and run on one worker, one after another:
# dockerd's images (imported, pulled, built; test_target counts them). (The fixed serve ports
# of the unit tests are bound by one module each; free_port gives each worker its own range.)
SHARED = {
    "dockerd": "targets/docker/ top/test_docker.py offline/test_images.py "
    "render/test_host_scripts.py targets/hosts/test_port_owner.py",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not getattr(config.option, "loadgroup", False):  # an xdist worker's, with --dist loadgroup
        return
    for item in items:
        module = item.nodeid.split("::")[0].removeprefix("tests/")
        group = next((g for g, mods in SHARED.items() for m in mods.split()
                      if module.startswith(m)), module)
        item.add_marker(pytest.mark.xdist_group(group))
    # the long shared groups first: handed out last, one would run alone at the end
    items.sort(key=lambda i: i.get_closest_marker("xdist_group").args[0] not in SHARED)


def pytest_sessionstart(session: pytest.Session) -> None:
    from tests import leftovers

    if not hasattr(session.config, "workerinput"):  # under xdist: the controller only
        session.config.stash[LEFT] = leftovers.snapshot()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a test left a process or a network namespace behind (tests/
    leftovers.py), naming each; then stop them so that the next run starts clean. Under xdist
    the controller checks once, after every worker ended (their temporary folders are under
    its own)."""
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
