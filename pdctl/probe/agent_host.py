"""Where the transfer agent runs (probe/transfer.py): a host over its SSH connection, or this
machine for local hosts. Uploads the agent into a fresh folder, starts it with the engine's
Python (the host's venv, conda env or docker image; plain python3 for TCP), follows its
output, and on stop kills its process group (or removes its container) and its folder."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pdctl.plan.model import Instance, Plan
from pdctl.preflight.run import Options
from pdctl.render.template import quote, quote_path, templates_dir
from pdctl.spec.model import Host

AGENT_DIR = "xfer"  # templates/xfer/
FOLDER = "/tmp/pdctl-xfer.XXXXXXXX"
AGENT_LIFE_S = 70.0  # past --seconds: the agent's own alarm (50 s) and a margin


def agent_files() -> dict[str, bytes]:
    root = Path(templates_dir()) / AGENT_DIR
    return {p.name: p.read_bytes() for p in sorted(root.glob("*.py"))}


def python_command(plan: Plan, inst: Instance, transport: str, folder: str, name: str) -> str:
    """How the agent's Python starts on the instance's host: the engine's environment for
    the connectors' transports, python3 for TCP."""
    host = inst.host
    assert host is not None
    if transport == "tcp":
        return "python3"
    if host.runtime == "venv" and host.venv:
        return quote_path(host.venv.rstrip("/") + "/bin/python")
    if host.runtime == "conda":
        env = quote(host.conda_env or f"pdctl-vllm-{plan.spec.engine.version}")
        return (
            '"$(c="${CONDA_EXE:-$(command -v conda 2>/dev/null)}"; for d in ~/miniforge3 '
            '~/mambaforge ~/miniconda3 ~/anaconda3 /opt/conda; do [ -x "$c" ] || '
            f'c="$d/bin/conda"; done; echo "$c")" run --no-capture-output -n {env} python'
        )
    unit = next((u for u in plan.units if u.name == inst.name), None)
    image = unit.image if unit is not None and unit.image else ""
    # docker splits --gpus at commas unless the device list is quoted inside the value
    gpus = f"--gpus {quote(chr(34) + 'device=' + ','.join(map(str, inst.gpus)) + chr(34))} " \
        if inst.gpus else ""
    return (
        # --pull never: a preflight does not pull a 10 GB image (the cause says to pull it)
        f"docker run --rm --pull never --name {quote(name)} --network host --ipc host "
        "--ulimit memlock=-1 "
        f"{gpus}-v {quote(folder)}:{quote(folder)} --entrypoint python3 {quote(image)}"
    )


class Agent:
    """One running agent: its output lines as they come, its exit."""

    def __init__(self, host: AgentHost, container: str) -> None:
        self.host, self.container = host, container
        self.lines: list[str] = []
        self.ended = threading.Event()
        self.pid = 0  # the agent's process group, once it said
        self.proc: subprocess.Popen[bytes] | None = None  # local agents

    def feed(self, line: str) -> None:
        self.lines.append(line)
        if not self.pid and line.startswith("{"):
            try:
                ev = json.loads(line)
            except ValueError:
                return
            if isinstance(ev, dict) and ev.get("event") in ("spawned", "start"):
                pgid = ev.get("pgid")  # its process group: conda run's too
                self.pid = pgid if isinstance(pgid, int) and pgid > 1 else 0

    def events(self) -> list[str]:
        out = []
        for line in list(self.lines):
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if isinstance(ev, dict):
                out.append(str(ev.get("event")))
        return out

    def wait_listening(self, timeout: float) -> bool:
        """True once the listener listens; False when it failed, ended or timed out first."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            seen = self.events()
            if "listening" in seen and "error" not in seen:
                return True
            if "error" in seen or self.ended.is_set():
                return False
            time.sleep(0.05)
        return False

    def wait_exit(self, timeout: float) -> None:
        self.ended.wait(timeout)

    def failed(self) -> bool:
        return "error" in self.events() or "result" not in self.events()

    def output(self) -> str:
        return "".join(x + "\n" for x in self.lines)

    def stop(self) -> None:
        if not self.ended.is_set():
            # interrupted right after the start: its first line may still be on its way
            end = time.monotonic() + 5
            while not self.pid and not self.container and not self.ended.is_set() \
                    and time.monotonic() < end:
                time.sleep(0.02)
            self.host.kill(self)
        self.ended.wait(5)


class AgentHost:
    """Common part: the upload folder and the start command."""

    folders: list[str]

    def start(self, plan: Plan, inst: Instance, env: dict[str, str], args: list[str]) -> Agent:
        # a folder per agent: each deletes its own once started (two may share a host)
        folder = self.upload(agent_files())
        self.folders.append(folder)
        transport = args[args.index("--transport") + 1]
        name = f"pdctl-xfer-{os.getpid()}-{args[0]}-{int(time.time() * 1000) % 10**8}"
        docker = inst.host is not None and inst.host.runtime == "docker" and transport != "tcp"
        py = python_command(plan, inst, transport, folder, name)
        if docker:
            envs = " ".join(f"-e {quote(k + '=' + v)}" for k, v in sorted(env.items()))
            py = py.replace(" --entrypoint ", f" {envs} --entrypoint ", 1) if envs else py
            cmd = f"exec {py} {quote(folder + '/agent.py')} "
        else:
            envs = " ".join(quote(f"{k}={v}") for k, v in sorted(env.items()))
            # `timeout` bounds it even before Python runs (a stuck `conda run`), and makes the
            # agent's process group: what stop() kills
            life = float(args[args.index("--seconds") + 1]) + AGENT_LIFE_S
            # the shell says its pid first: timeout(1), exec'd in its place, leads the group
            cmd = ("echo '{\"event\": \"spawned\", \"pgid\": '$$'}'; "
                   f"cd {quote(folder)} && exec timeout -k 5 {life:.0f} env {envs} {py} "
                   "agent.py ")
        agent = Agent(self, name if docker else "")
        self.launch(agent, cmd + " ".join(quote(a) for a in args))
        return agent

    def upload(self, files: dict[str, bytes]) -> str:
        raise NotImplementedError

    def launch(self, agent: Agent, command: str) -> None:
        raise NotImplementedError

    def kill(self, agent: Agent) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError


def _stop_script(agent: Agent, folder: str) -> str:
    parts = []
    if agent.container:  # its pids are the container's own: never signal them here
        parts.append(f"docker rm -f {quote(agent.container)} >/dev/null 2>&1")
    elif agent.pid > 1:
        pg = f"-{agent.pid}"
        parts.append(f"kill -TERM -- {pg} 2>/dev/null; sleep 0.3; kill -KILL -- {pg} 2>/dev/null")
    if folder:
        parts.append(f"rm -rf {quote(folder)}")
    return "; ".join(parts) + "; true"


class SshHost(AgentHost):
    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.folders = []
        self.channels: list[Any] = []

    def upload(self, files: dict[str, bytes]) -> str:
        from pdctl.targets.ssh import put_file

        res = self.conn.run(f"mktemp -d {FOLDER}", timeout=30, step="preparing the transfer")
        folder = res.out.strip()
        if res.rc != 0 or not folder.startswith("/tmp/pdctl-xfer."):
            raise OSError(f"mktemp failed: {(res.err or res.out).strip()[:200]}")
        sftp = self.conn.sftp("uploading the transfer agent")
        try:
            for name, data in files.items():
                put_file(sftp, f"{folder}/{name}", data, 0o600)
        finally:
            sftp.close()
        return folder

    def launch(self, agent: Agent, command: str) -> None:
        from pdctl.targets.ssh import BASH

        chan = self.conn.session("starting the transfer agent")
        self.channels.append(chan)
        chan.exec_command(BASH + shlex.quote(command))
        chan.shutdown_write()

        def pump() -> None:
            buf = {1: b"", 2: b""}
            try:
                while True:
                    got = False
                    for fd, ready, recv in ((1, chan.recv_ready, chan.recv),
                                            (2, chan.recv_stderr_ready, chan.recv_stderr)):
                        while ready():
                            buf[fd] += recv(65536)
                            got = True
                        *lines, buf[fd] = buf[fd].split(b"\n")
                        for line in lines:
                            agent.feed(line.decode("utf-8", "replace"))
                    if not got and (chan.eof_received or chan.closed):
                        break
                    if not got:
                        time.sleep(0.02)
            except OSError:
                pass
            for rest in buf.values():
                if rest.strip():
                    agent.feed(rest.decode("utf-8", "replace"))
            agent.ended.set()

        threading.Thread(target=pump, daemon=True).start()

    def kill(self, agent: Agent) -> None:
        try:
            self.conn.run(_stop_script(agent, ""), timeout=20, step="stopping the transfer agent")
        except Exception:  # noqa: BLE001 - the agent ends by itself (its alarm) regardless
            pass

    def close(self) -> None:
        try:
            if self.folders:
                self.conn.run("rm -rf " + " ".join(quote(f) for f in self.folders),
                              timeout=20, step="removing the transfer agent")
        except Exception:  # noqa: BLE001 - a lost connection: the agent removed its folder
            pass
        for chan in self.channels:
            chan.close()
        self.conn.close()


class LocalHost(AgentHost):
    def __init__(self, options: Options) -> None:
        self.options = options
        self.folders = []

    def upload(self, files: dict[str, bytes]) -> str:
        folder = tempfile.mkdtemp(prefix="pdctl-xfer.", dir="/tmp")
        for name, data in files.items():
            Path(folder, name).write_bytes(data)
        return folder

    def launch(self, agent: Agent, command: str) -> None:
        proc = subprocess.Popen(  # noqa: S603 - fixed command, values quoted
            ["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        agent.proc = proc

        def pump() -> None:
            assert proc.stdout is not None
            for raw in proc.stdout:
                agent.feed(raw.decode("utf-8", "replace").rstrip("\n"))
            proc.wait()
            agent.ended.set()

        threading.Thread(target=pump, daemon=True).start()

    def kill(self, agent: Agent) -> None:
        if agent.proc is not None and agent.proc.poll() is None:
            agent.pid = agent.pid or agent.proc.pid  # its own session: group id = its pid
        subprocess.run(["bash", "-c", _stop_script(agent, "")], capture_output=True,  # noqa: S603
                       timeout=20)

    def close(self) -> None:
        for folder in self.folders:
            shutil.rmtree(folder, ignore_errors=True)


def open_host(host: Host, options: Options, local: bool) -> AgentHost:
    if local:
        return LocalHost(options)
    from pdctl.targets.ssh import Connection

    return SshHost(Connection(host, options.ssh).connect())
