"""The network preflight (phase 2 on hosts, and multi-node groups): the commands, the transfers
it runs, their parsers and the verdicts.

Per pair, one at a time (so that no two measurements share a link): the transfer agent
(AGENTS: templates/xfer/, standard-library Python plus the transport's package) is uploaded
to a fresh folder on both hosts (`SshHost`, or `LocalHost` for this machine); the decode side
listens on the decode instance's connector port at the address the spec gives its host, the
prefill side connects and writes into the listener's memory, both print JSON lines. Bounded:
`Bounds.bytes` and `Bounds.seconds`, and every agent ends itself after seconds + its grace.
Cleaned up on every exit path (errors, Ctrl-C): the agents' process groups are killed (or
their containers removed) and their folders removed. A pair whose hosts lack an interface the
spec names is not tried (skipped, with the reason). Each multi-node group, after the
rendezvous reach probe (group.py), runs the agent's `group` transport on every node at once:
torch.distributed over the group's rendezvous port on the leader's peer address, with the
backend the engines use (nccl on GPUs, gloo on CPU engines) and each node's transport
variables, one all_to_all_single after another within the bounds.

Recorded as:
- `net-devices.txt` (every phase 2 host): one line per network interface, `NAME OPERSTATE`,
  from /sys/class/net; `nvidia-peermem.txt` on RDMA hosts;
- `transfer-to-DECODE.jsonl` (a prefill host's folder): pdctl's `pair` line (transport,
  address, port, bounds), then the JSON lines of both agents (`side` listen or send) and their
  log lines (`{"event": "log", ...}`), or a `skipped` line saying why no transfer was tried;
- `group-transfer-GROUP.jsonl` (a group leader's host): pdctl's `group` line (backend,
  address, port, nodes), then every rank's JSON lines (`side` rank0, rank1, ...), or `skipped`.

The verdicts: one finding per prefill host -> decode host pair (and per group): reached or
not, and why (interface, GID, memlock, peermem, firewall port, ...), the bandwidth and latency
measured, against the KV bandwidth the plan needs (KV bytes per request x the workload's
request rate, the pair's share of it); the locked-memory limit of RDMA hosts.

The agents, the transfers and the commands' runs do I/O (`SshHost`, `LocalHost`,
`open_host`, `run_pair`, `transfer_pairs`, `run_group`, `transfer_groups`); the commands, the
parsers and the checks are pure.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdctl.capacity import kv_bytes_per_token
from pdctl.capacity.kv_pull import known_model, kv_pull
from pdctl.errors import PdctlError, UsageError
from pdctl.plan import mooncake_tcp
from pdctl.plan.kv import honours_device_name
from pdctl.plan.model import Instance, Plan
from pdctl.plan.shape import peer_address
from pdctl.preflight import group as g
from pdctl.preflight.facts import SSH, Facts, Missing, Transfer
from pdctl.preflight.finding import Finding, PlanCheck, Status
from pdctl.preflight.run import Bounds, Options, Step
from pdctl.render.template import quote, quote_path, templates_dir
from pdctl.spec.model import Host, Spec
from pdctl.targets.ssh import BASH, Connection, put_file

NET_DEVICES = "net-devices.txt"
PEERMEM = "nvidia-peermem.txt"  # `loaded` or `absent`: /sys/module/nvidia_peermem
TRANSFER_PREFIX = "transfer-to-"
TRANSFER_SUFFIX = ".jsonl"
GROUP_PREFIX = "group-transfer-"
# The host-side programs (templates/xfer/: agent.py and its transports), uploaded per run
AGENTS = "xfer"
FOLDER = "/tmp/pdctl-xfer.XXXXXXXX"
AGENT_LIFE_S = 70.0  # past --seconds: the agent's own alarm (50 s) and a margin
AGENT_GRACE_S = 50.0  # the agent's own grace (agent.py: GRACE_S + CONNECT_S)
NET_DEVICES_COMMAND = ('for d in /sys/class/net/*; do [ -e "$d" ] || continue; '
                       'printf "%s %s\n" "${d##*/}" "$(cat "$d/operstate" 2>/dev/null)"; done')
# Variables that name network interfaces or RDMA devices the transports must find.
IFACE_VARS = ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "UCX_NET_DEVICES")


TRANSPORTS = {"nixl": "nixl", "mooncake": "mooncake", "p2p-nccl": "nccl"}


def transport_of(connector: str | None) -> str:
    """The transport a connector moves KV with (`tcp` for any other)."""
    return TRANSPORTS.get(connector or "", "tcp")


def host_pairs(instances: Any) -> list[tuple[Any, Any]]:
    """(prefill, decode) instances, one pair per (prefill host, decode host), the hosts'
    first instances standing for them, in plan order. Duck-typed over the plan's instances
    (role, host.name): facts sit below the plan."""
    out: dict[tuple[str, str], tuple[Any, Any]] = {}
    placed = [i for i in instances if i.host is not None]
    for p in (i for i in placed if i.role == "prefill"):
        for d in (i for i in placed if i.role == "decode"):
            out.setdefault((p.host.name, d.host.name), (p, d))
    return list(out.values())


RDMA_TLS = ("rc", "ud", "dc", "ib", "rdma", "all")  # UCX_TLS names that mean verbs


def uses_rdma(protocol: str, env: dict[str, str], rdma_devices: tuple[str, ...]) -> bool:
    """Whether an instance's KV transfer would register memory with an RDMA NIC: Mooncake's
    protocol rdma, UCX_TLS naming verbs transports (or RDMA `DEVICE:PORT` in
    UCX_NET_DEVICES), NCCL_IB_HCA, or the host's rdmaDevices."""
    tls = [x.strip().split("_")[0] for x in env.get("UCX_TLS", "").lstrip("^").split(",")]
    return (protocol == "rdma"
            or (not env.get("UCX_TLS", "").startswith("^") and any(t in RDMA_TLS for t in tls))
            or ":" in env.get("UCX_NET_DEVICES", "")
            or bool(env.get("NCCL_IB_HCA"))
            or bool(rdma_devices))


def commands(spec: Spec, host: Host) -> dict[str, str]:
    """file name -> shell command for a phase 2 or 3 host: its interfaces, and on RDMA hosts the
    locked-memory limit (RDMA registers, pins, the KV buffers) and nvidia_peermem."""
    out: dict[str, str] = {}
    dis = spec.disaggregation
    if spec.disaggregated and dis is not None:
        out[NET_DEVICES] = NET_DEVICES_COMMAND
        if uses_rdma(dis.protocol, dict(spec.engine.env), host.rdma_devices):
            out[g.MEMLOCK] = g.memlock_command(host)
            out[PEERMEM] = "if [ -d /sys/module/nvidia_peermem ]; then echo loaded; " \
                "else echo absent; fi"
    return out


def transfer_file(decode_host: str) -> str:
    return f"{TRANSFER_PREFIX}{decode_host}{TRANSFER_SUFFIX}"


def group_file(group: str) -> str:
    return f"{GROUP_PREFIX}{group}{TRANSFER_SUFFIX}"


def parse_net_devices(text: str) -> tuple[str, ...]:
    """Interface names, sorted (`lo` included)."""
    names = {line.split()[0] for line in text.splitlines() if line.split()}
    return tuple(sorted(n for n in names if re.fullmatch(r"[A-Za-z0-9_.:@-]{1,64}", n)))


def named_interfaces(var: str, value: str) -> tuple[tuple[str, bool], ...]:
    """(name, exact) pairs a variable requires to exist: NCCL_SOCKET_IFNAME and
    GLOO_SOCKET_IFNAME are prefixes (`eth` matches eth0) unless `=`-prefixed, and `^` lists
    are exclusions (nothing required); UCX_NET_DEVICES names devices exactly, `all` or RDMA
    `DEVICE:PORT` entries (checked with the RDMA devices, not here) excepted."""
    value = value.strip()
    if not value or value.startswith("^"):
        return ()
    if var == "UCX_NET_DEVICES":
        return tuple((n, True) for n in value.split(",") if n and n != "all" and ":" not in n)
    exact = value.startswith("=")
    return tuple((n, exact) for n in value.lstrip("=").split(",") if n)


def missing_interfaces(
    env: dict[str, str], network_interface: str | None, present: tuple[str, ...]
) -> list[str]:
    """`VAR=value` (or `networkInterface=value`) for each named interface that is absent."""
    wanted = [(v, env[v]) for v in IFACE_VARS if env.get(v)]
    if network_interface:
        wanted.append(("networkInterface", "=" + network_interface))
    out = []
    for var, value in wanted:
        for name, exact in named_interfaces(var, value):
            ok = name in present if exact else any(p.startswith(name) for p in present)
            if not ok:
                out.append(f"{var}={value.lstrip('=') if var == 'networkInterface' else value}")
                break
    return out


def parse_transfer(decode: str, text: str) -> Transfer:
    """The transfer file of one pair; unreadable lines are kept as log lines."""
    fields: dict = {"decode": decode}
    logs: list[str] = []
    failure: dict | None = None
    result: dict | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            logs.append(line.strip()[:500])
            continue
        if not isinstance(ev, dict):
            continue
        kind = ev.get("event")
        if kind == "pair":
            for key in ("transport", "address"):
                fields[key] = str(ev.get(key, ""))
            fields["port"] = int(ev.get("port") or 0)
        elif kind == "skipped":
            fields["skipped"] = str(ev.get("reason", "skipped"))
        elif kind == "log":
            logs.append(str(ev.get("line", ""))[:500])
        elif kind == "connected":
            fields["connected"] = True
        elif kind == "phase":
            key = "listen_phase" if ev.get("side") == "listen" else "phase"
            fields[key] = str(ev.get("name", ""))[:200]
        elif kind == "error" and failure is None:
            failure = ev
        elif kind == "result" and (result is None or ev.get("side") == "listen"):
            result = ev  # the listener's copy holds `verified`
    if result is not None:
        fields.update(
            bytes=int(result.get("bytes") or 0), seconds=float(result.get("seconds") or 0),
            gbps=float(result.get("gbps") or 0), latency_us=_number(result.get("latency_us")),
            verified=bool(result.get("verified")), memory=str(result.get("memory") or "")[:200],
            batch=int(result.get("batch") or 0))
    if failure is not None:
        fields.update(
            side=str(failure.get("side", "")), stage=str(failure.get("stage", "")),
            errno=str(failure.get("errno", "")), message=str(failure.get("message", ""))[:2000])
    return Transfer(**fields, logs=tuple(logs[-50:]))


def parse_group(group: str, text: str) -> Transfer:
    """A group's all-to-all: the slowest rank's bandwidth, the worst latency, verified when
    every node's rank reported its slices right; the first failure otherwise."""
    lines = []
    nodes, results = 0, []
    for line in text.splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            ev = None
        if isinstance(ev, dict) and ev.get("event") == "group":
            nodes = len(ev.get("nodes") or ())
            ev = {**ev, "event": "pair", "transport": str(ev.get("backend", ""))}
        if isinstance(ev, dict) and ev.get("event") == "result":
            results.append(ev)
            continue
        lines.append(json.dumps(ev) if isinstance(ev, dict) else line)
    t = parse_transfer(group, "\n".join(lines))
    if results and len(results) >= nodes and not t.stage and not t.skipped:
        gbps = min(float(r.get("gbps") or 0) for r in results)
        lat = [x for x in (_number(r.get("latency_us")) for r in results) if x is not None]
        return Transfer(**{**t.__dict__, "gbps": gbps, "latency_us": max(lat) if lat else None,
                           "bytes": int(results[0].get("bytes") or 0),
                           "seconds": max(float(r.get("seconds") or 0) for r in results),
                           "verified": all(bool(r.get("verified")) for r in results)})
    if not t.stage and not t.skipped:
        return Transfer(**{**t.__dict__, "stage": "result", "gbps": None, "message":
                           f"{len(results)} of {nodes} nodes reported a result"})
    return t


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) else None


def fields(raw: dict[str, str]) -> tuple[dict[str, Any], list[Missing]]:
    """HostFacts fields from a host's raw outputs."""

    def read(prefix: str, parse: Callable[[str, str], Transfer]) -> tuple[Transfer, ...]:
        out = []
        for name, text in sorted(raw.items()):
            if not (name.startswith(prefix) and name.endswith(TRANSFER_SUFFIX)):
                continue
            which = name[len(prefix) : -len(TRANSFER_SUFFIX)]
            try:
                out.append(parse(which, text))
            except (ValueError, TypeError, OverflowError) as exc:  # a hand-edited recording
                out.append(Transfer(which, stage="recording", message=f"unreadable {name}: "
                                    f"{type(exc).__name__}"))
        return tuple(out)

    devices = parse_net_devices(raw[NET_DEVICES]) if NET_DEVICES in raw else None
    peermem = raw[PEERMEM].strip().splitlines()[-1:] if raw.get(PEERMEM, "").strip() else None
    return {"net_devices": devices, "peermem": None if peermem is None else
            peermem == ["loaded"], "transfers": read(TRANSFER_PREFIX, parse_transfer),
            "group_transfers": read(GROUP_PREFIX, parse_group)}, []


def agent_files() -> dict[str, bytes]:
    root = Path(templates_dir()) / AGENTS
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
        env = g.conda_env(host, plan.spec)
        return f'"$({g.FIND_CONDA}; echo "$c")" run --no-capture-output -n {env} python'
    unit = next((u for u in plan.units if u.name == inst.name), None)
    image = unit.image if unit is not None and unit.image else ""
    # docker splits --gpus at commas unless the device list is quoted inside the value
    gpus = f"--gpus {quote(chr(34) + 'device=' + ','.join(map(str, inst.gpus)) + chr(34))} " \
        if inst.gpus else ""
    return (# --pull never: a preflight does not pull a 10 GB image (the cause says to pull it)
            f"docker run --rm --pull never --name {quote(name)} --network host --ipc host "
            "--ulimit memlock=-1 "
            f"{gpus}-v {quote(folder)}:{quote(folder)} --entrypoint python3 {quote(image)}")


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
            start_new_session=True)
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

    return SshHost(Connection(host, options.ssh).connect())


# Environment the transports read; nothing else of the engine's environment is passed.
ENV_PREFIXES = ("UCX_", "NIXL_", "NCCL_", "GLOO_", "MC_", "CUDA_VISIBLE_DEVICES", "TORCH_NCCL")


@dataclass(frozen=True)
class Pair:
    prefill: Instance
    decode: Instance
    transport: str  # tcp, nixl, mooncake, nccl
    address: str  # where the decode side listens (its host's address for peers)
    port: int


def listen_port(plan: Plan, decode: Instance) -> int:
    """The decode instance's connector port (NIXL side channel, P2pNccl kv_port); Mooncake
    decodes have none: the connector's first bootstrap port."""
    for _, port in decode.extra_ports:
        return port
    dis = plan.spec.disaggregation
    return dis.bootstrap_port if dis is not None else 8998


def pairs(plan: Plan) -> list[Pair]:
    """One pair per (prefill host, decode host), their first instances standing for them."""
    if plan.on_kubernetes or not plan.disaggregated or plan.spec.disaggregation is None:
        return []
    transport = transport_of(plan.spec.disaggregation.connector)
    return [Pair(p, d, transport, peer_address(d.host), listen_port(plan, d))
            for p, d in host_pairs(plan.instances)]


def agent_env(inst: Instance) -> dict[str, str]:
    return {k: v for k, v in inst.env if k.startswith(ENV_PREFIXES)}


def agent_args(plan: Plan, pair: Pair, side: str, bounds: Bounds) -> list[str]:
    dis = plan.spec.disaggregation
    assert dis is not None
    args = [side, "--transport", pair.transport, "--port", str(pair.port),
            "--bytes", str(bounds.bytes), "--seconds", f"{bounds.seconds:g}"]
    args += ["--bind", pair.address] if side == "listen" else ["--to", pair.address]
    if side == "send" and pair.transport == "mooncake":
        assert pair.prefill.host is not None
        args += ["--bind", peer_address(pair.prefill.host)]
    gpu = plan.spec.engine.device != "cpu" and dis.kv_buffer_device != "cpu"
    if pair.transport in ("nixl", "nccl", "mooncake") and gpu:
        # the engines register their GPU KV cache (MooncakeConnector: register_kv_caches),
        # so the agent registers GPU memory too where the host has CUDA (GPUDirect RDMA needs
        # nvidia-peermem); it falls back to host memory, and says so, where it has none
        args += ["--device", "cuda"]
    if pair.transport == "mooncake":
        # the devices the engine will pass: none before vLLM 0.25.0 (Mooncake then finds the
        # NICs itself, narrowed by MC_TE_FILTERS, which the agent's environment carries)
        devices = dis.device_name if honours_device_name(plan.spec.engine.version) else None
        args += ["--protocol", dis.protocol, "--rdma-devices", devices or ""]
        if side == "send":  # a decode step's pull, as one batch (a burst's, refused by a
            # TCP queue too small: docs/phase2-bare-metal.md)
            args += ["--batch", str(pull_descriptors(plan.spec))]
    return args


def pull_descriptors(spec: Spec) -> int:
    """Descriptors of the largest KV pull one decode step asks of a prefill, as vLLM's
    MooncakeConnector writes it in one batch_transfer_sync_write once the KV cache is
    fragmented: decode's whole batch of the workload's mean prompt (capacity.kv_pull), at most
    what Mooncake's TCP transport can hold with pdctl's settings (mooncake_tcp.CAPACITY)."""
    # the model.config file is not read here
    return min(mooncake_tcp.CAPACITY, kv_pull(spec, known_model(spec)).step)


def header(pair: Pair, bounds: Bounds) -> str:
    assert pair.prefill.host is not None and pair.decode.host is not None
    return json.dumps({
        "event": "pair", "prefill": pair.prefill.host.name, "decode": pair.decode.host.name,
        "transport": pair.transport, "address": pair.address, "port": pair.port,
        "bytes": bounds.bytes, "seconds": bounds.seconds}, sort_keys=True) + "\n"


def skip_reason(nodes: tuple[Instance, ...], raw: dict[str, dict[str, str]]) -> str:
    """Why a pair's (or a group's) transfer cannot be tried: a host unreachable over SSH, or an
    interface that the spec names missing on a host (read from its /sys/class/net before any
    transfer)."""
    for inst in nodes:
        host = inst.host
        assert host is not None
        files = raw.get(host.name, {})
        if SSH in files:
            return f"{host.name} unreachable over SSH"
        if NET_DEVICES not in files:
            continue
        present = parse_net_devices(files[NET_DEVICES])
        absent = missing_interfaces(agent_env(inst), host.network_interface, present)
        if absent:
            return (f"interface: {absent[0]} names no interface on {host.name} "
                    f"(it has {', '.join(present) or 'none'})")
    return ""


def tag(text: str, side: str) -> str:
    """The agent's output as recorded: its JSON lines with `side`, other lines as logs."""
    out = []
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            ev = json.loads(line)
        except ValueError:
            ev = None
        if not isinstance(ev, dict):
            ev = {"event": "log", "line": line[:500]}
        ev["side"] = side
        out.append(json.dumps(ev, sort_keys=True))
    return "".join(x + "\n" for x in out)


Opener = Callable[[Host], AgentHost]


def run_pair(plan: Plan, pair: Pair, bounds: Bounds, opener: Opener) -> str:
    """One transfer; the recorded text (header, both agents' lines)."""
    assert pair.prefill.host is not None and pair.decode.host is not None
    text = header(pair, bounds)
    life = bounds.seconds + AGENT_GRACE_S + 10
    listener = sender = None
    opened: list[AgentHost] = []
    try:
        dhost = opener(pair.decode.host)
        opened.append(dhost)
        phost = dhost
        if pair.decode.host.name != pair.prefill.host.name:
            phost = opener(pair.prefill.host)
            opened.append(phost)
        listener = dhost.start(plan, pair.decode, agent_env(pair.decode),
                               agent_args(plan, pair, "listen", bounds))
        ready = listener.wait_listening(timeout=life)
        if not ready:
            listener.stop()
            return text + tag(listener.output(), "listen")
        sender = phost.start(plan, pair.prefill, agent_env(pair.prefill),
                             agent_args(plan, pair, "send", bounds))
        sender.wait_exit(life)
        listener.wait_exit(2 if sender.failed() else life)
        return text + tag(listener.output(), "listen") + tag(sender.output(), "send")
    except UsageError:
        raise
    except (PdctlError, OSError) as exc:  # a host lost, or no room in /tmp: a fact too
        done = "".join(tag(a.output(), side) for a, side in ((listener, "listen"),
                                                             (sender, "send")) if a)
        return text + done + failure(exc)
    finally:
        for proc in (sender, listener):
            if proc is not None:
                proc.stop()
        for h in opened:
            h.close()


def failure(exc: BaseException) -> str:
    """pdctl's own failure to run the agents (SSH, upload), as an agent error line."""
    return json.dumps({"event": "error", "side": "pdctl", "stage": "ssh", "errno": "",
                       "message": str(exc)[:2000]}, sort_keys=True) + "\n"


def transfer_pairs(
    plan: Plan, options: Options, bounds: Bounds, raw: dict[str, dict[str, str]],
    local: Callable[[Host], bool], step: Callable[[str, str], None] | None = None,
) -> dict[str, dict[str, str]]:
    """prefill host name -> {transfer file: recorded text} for every pair."""
    out: dict[str, dict[str, str]] = {}
    for pair in pairs(plan):
        assert pair.prefill.host is not None and pair.decode.host is not None
        name = transfer_file(pair.decode.host.name)
        why = skip_reason((pair.prefill, pair.decode), raw)
        if why:
            text = header(pair, bounds) + json.dumps({"event": "skipped", "reason": why}) + "\n"
        else:
            text = run_pair(plan, pair, bounds, lambda h: open_host(h, options, local(h)))
        out.setdefault(pair.prefill.host.name, {})[name] = text
        if step:
            step(pair.prefill.host.name, name)
    return out


def backend(plan: Plan) -> str:
    return "gloo" if plan.spec.engine.device == "cpu" else "nccl"


def groups(plan: Plan) -> list[tuple[Instance, int]]:
    """(leader, rendezvous port) of every multi-node group on hosts."""
    if plan.on_kubernetes:
        return []
    out = []
    for leader in plan.instances:
        port = g.rendezvous_port(leader)
        if leader.workers and port is not None and leader.host is not None:
            out.append((leader, port))
    return out


def run_group(plan: Plan, leader: Instance, port: int, bounds: Bounds,
              opener: Callable[[Host], AgentHost], raw: dict[str, dict[str, str]]) -> str:
    nodes = (leader, *leader.workers)
    assert leader.host is not None
    address = peer_address(leader.host)
    text = json.dumps({
        "event": "group", "group": leader.name, "backend": backend(plan), "address": address,
        "port": port, "nodes": [n.host.name for n in nodes if n.host is not None],
        "bytes": bounds.bytes, "seconds": bounds.seconds}, sort_keys=True) + "\n"
    why = skip_reason(nodes, raw)
    if why:
        return text + json.dumps({"event": "skipped", "reason": why}) + "\n"
    life = bounds.seconds + AGENT_GRACE_S + 10
    hosts: dict[str, AgentHost] = {}
    agents = []
    try:
        for rank, node in enumerate(nodes):
            assert node.host is not None
            if node.host.name not in hosts:
                hosts[node.host.name] = opener(node.host)
            args = ["rank", "--transport", "group", "--to", address, "--port", str(port),
                    "--rank", str(rank), "--world", str(len(nodes)), "--backend", backend(plan),
                    "--bytes", str(bounds.bytes), "--seconds", f"{bounds.seconds:g}"]
            agent = hosts[node.host.name].start(plan, node, agent_env(node), args)
            agents.append(agent)
            if rank == 0 and not agent.wait_listening(life):
                break
        for agent in agents:
            agent.wait_exit(life)
        return text + "".join(tag(a.output(), f"rank{r}") for r, a in enumerate(agents))
    except UsageError:
        raise
    except (PdctlError, OSError) as exc:  # a host lost, or no room in /tmp: a fact too
        done = "".join(tag(a.output(), f"rank{r}") for r, a in enumerate(agents))
        return text + done + failure(exc)
    finally:
        for agent in agents:
            agent.stop()
        for h in hosts.values():
            h.close()


def transfer_groups(plan: Plan, options: Options, bounds: Bounds, raw: dict[str, dict[str, str]],
                    local: Callable[[Host], bool]) -> dict[str, dict[str, str]]:
    """leader host name -> {group transfer file: recorded text}."""
    out: dict[str, dict[str, str]] = {}
    for leader, port in groups(plan):
        assert leader.host is not None
        text = run_group(plan, leader, port, bounds, lambda h: open_host(h, options, local(h)), raw)
        out.setdefault(leader.host.name, {})[group_file(leader.name)] = text
    return out


CHECK = "net.transfer"
GATHER = "run `pdctl preflight` against the hosts (without --no-transfer)"
MEMLOCK_FIX = (
    "raise the locked-memory limit to unlimited for the engines (`* soft memlock unlimited` "
    "and `* hard memlock unlimited` in /etc/security/limits.conf, LimitMEMLOCK=infinity for a "
    "service, `--ulimit memlock=-1` for docker)")
PEERMEM_LOG = r"GPU ?Direct RDMA Disabled|nvidia[_-]peermem"
PEERMEM_FIX = ("load the module (`sudo modprobe nvidia_peermem`) on both hosts, or use dmabuf "
               "(kernel >= 5.12 with the open NVIDIA driver)")
# (pattern in the agents' messages and logs, cause, fix): the transports' own words.
CAUSES: tuple[tuple[str, str, str], ...] = (
    (r"GID is NULL|GID index .*(invalid|out of range)|[Ff]ailed to (query|get) GID",
     "GID: the GID index names no address on the port",
     "pick a RoCE v2 GID index that exists (MC_GID_INDEX for Mooncake, NCCL_IB_GID_INDEX for "
     "NCCL, UCX_IB_GID_INDEX for UCX): see /sys/class/infiniband/DEV/ports/1/gids and "
     "gid_attrs/types"),
    # registering GPU memory without a peer-memory module fails with EFAULT
    (r"ibv_reg_mr.*Bad address|nvidia[_-]peermem",
     "peermem: GPUDirect RDMA unavailable (nvidia_peermem not loaded)", PEERMEM_FIX),
    (r"ibv_reg_mr|[Cc]annot allocate memory|RLIMIT_MEMLOCK|memlock",
     "memlock: memory registration failed (locked-memory limit)", MEMLOCK_FIX),
    (r"no socket interface found|network device '[^']*' is not available|No such device",
     "interface: the transport found no interface it was told to use",
     "name an interface the host has in NCCL_SOCKET_IFNAME / UCX_NET_DEVICES (`ip -br link`)"),
    (r"no usable transports|[Nn]o (suitable|available) transport|unreachable destination",
     "UCX: no transport in UCX_TLS reaches the other host over UCX_NET_DEVICES",
     "let UCX_TLS include a transport both hosts have (e.g. `tcp`, or `rc` with RDMA) and "
     "UCX_NET_DEVICES name a device on the route between them"),
    (r"No such image|image .* not found|[Uu]nable to find image",
     "image: the engine image is not on the host (preflight does not pull it)",
     "pull the pinned image on the host first (`docker pull IMAGE`), then rerun preflight"),
    (r"TCP lane queue-full|Failed to admit TCP work",
     "Mooncake's TCP queue: one decode step's KV pull, as one batch to that peer, was refused, "
     "and often later batches to it too",
     f"leave {', '.join(s.env for s in mooncake_tcp.SETTINGS)} to pdctl (room for "
     f"{mooncake_tcp.CAPACITY:,} descriptors, Mooncake's most) or set them to hold the batch; "
     "a larger pull needs protocol rdma, a larger --block-size or a smaller decode.maxNumSeqs"),
    (r"No available RNIC|Found 0 HCAs", "RDMA device: Mooncake found no usable RNIC",
     "name RDMA devices with an ACTIVE port (disaggregation.deviceName; `ibv_devices`, "
     "`ibv_devinfo`), check the container sees /dev/infiniband, or use protocol tcp"))


def pair_name(p: Instance, d: Instance) -> str:
    assert p.host is not None and d.host is not None
    return f"{p.host.name} -> {d.host.name}"


def cause(t: Transfer) -> tuple[str, str]:
    """(cause, fix) of a transfer that did not go through."""
    if t.skipped:
        if t.skipped.startswith("interface:"):
            return t.skipped, "name an interface the host has (`ip -br link`), or fix the spec"
        return f"not tried: {t.skipped}", "fix the host's SSH access first (host.reach)"
    text = "\n".join((t.message, *t.logs))
    for pattern, why, fix in CAUSES:
        if re.search(pattern, text):
            return f"{why} ({_quote(text, pattern)})", fix
    where = f"{t.address}:{t.port}"
    if t.stage == "connect" and t.errno == "ETIMEDOUT":
        return (f"firewall port: no answer from {where} (TCP port {t.port} dropped)",
                f"let TCP port {t.port} in on the decode host ({t.address}) and any firewall "
                "between, e.g. `sudo iptables -I INPUT -p tcp --dport "
                f"{t.port} -j ACCEPT` or `sudo firewall-cmd --add-port={t.port}/tcp`")
    if t.stage == "connect" and t.errno == "ECONNREFUSED":
        return (f"refused: {where} (a firewall rejects the port, or nothing listened)",
                f"let TCP port {t.port} in on the decode host")
    if t.stage == "connect" and t.errno in ("EHOSTUNREACH", "ENETUNREACH"):
        return (f"route: {where} unreachable from the prefill host ({t.errno})",
                "fix the route, or give the decode host an addressForPeers the prefill "
                "host reaches")
    if t.stage == "bind" and t.errno == "EADDRINUSE":
        return (f"port {t.port} is in use on the decode host",
                f"free port {t.port} (a running deployment holds it: then nothing to do)")
    if t.stage == "bind" and t.errno == "EADDRNOTAVAIL":
        return (f"address: {t.address} is not an address of the decode host",
                "set the decode host's addressForPeers to one of its own addresses")
    if t.stage == "import":
        return (f"not installed: {t.message}",
                "install the connector's package in the engine's environment (`pdctl up` "
                "does), or check hosts[].venv / condaEnv")
    if (t.stage == "transfer" and t.errno == "ETIMEDOUT") or (t.stage == "timeout" and t.connected):
        sides = [f"prefill side: {t.phase}" if t.phase else "",
                 f"decode side: {t.listen_phase}" if t.listen_phase else ""]
        doing = f" ({'; '.join(x for x in sides if x)})" if any(sides) else ""
        return (f"no data: the side channel {where} answered but the transfer never "
                f"completed{doing}: the transport's own connections (ports of its own "
                "choosing) are blocked or misrouted",
                "let the transport's connections through the firewall between the hosts "
                "(not only the side-channel port), and check UCX_TLS / UCX_NET_DEVICES / "
                "NCCL_SOCKET_IFNAME name the route between them")
    if t.stage in ("timeout", "accept"):
        return (f"no transfer within the time bound ({t.side or 'agent'}: {t.message})",
                "check both hosts can reach each other on the connector's ports")
    if t.stage == "ssh":
        return (f"pdctl could not run the agents: {t.message}"[:400],
                "check the hosts answer over SSH (host.reach) and have room in /tmp")
    if t.stage == "result":
        what = f"no result: {t.message}"
    else:
        what = f"{t.stage} failed on the {t.side or 'agent'} side: {t.message or t.errno}"
    if t.logs:  # an agent that died without a word of its own (a crash in a library)
        what += f"; last log line: {t.logs[-1][:200]}"
    return what[:400], "see the recording's transfer file for the agents' logs"


def _quote(text: str, pattern: str) -> str:
    for line in text.splitlines():
        if re.search(pattern, line):
            return line.strip()[:200]
    return ""


def need_gbps(plan: Plan, model: Any, p: Instance, d: Instance) -> tuple[float | None, str]:
    """(GB/s this pair must carry, how it is reckoned) or (None, why unknown)."""
    wl = plan.spec.workload
    if wl is None or wl.requests_per_second is None:
        return None, "need unknown: set workload.requestsPerSecond"
    if model is None:
        return None, "need unknown: the model's shape is not known"

    spec = plan.spec
    per_token = kv_bytes_per_token(model, 1, 1, spec.model.kv_cache_dtype, spec.model.dtype)
    per_request = per_token * wl.prompt_tokens

    def count(role: str, host: str | None = None) -> int:
        return sum(1 for i in plan.instances if i.role == role and i.host is not None
                   and (host is None or i.host.name == host))

    assert p.host is not None and d.host is not None
    share = (count("prefill", p.host.name) / max(1, count("prefill"))) * (
        count("decode", d.host.name) / max(1, count("decode")))
    need = per_request * wl.requests_per_second * share / 1e9
    how = (f"KV {per_request / 2**20:.1f} MiB/request x {wl.requests_per_second:g} req/s"
           + (f" x {share:.2f} (this pair's share)" if share < 1 else ""))
    return need, how


def transfers(plan: Plan, facts: Facts, model: Any, run: bool = True) -> list[Finding]:
    """One finding per pair of `pairs`."""
    if plan.on_kubernetes or not plan.disaggregated or plan.spec.disaggregation is None:
        return []
    transport = transport_of(plan.spec.disaggregation.connector)
    out: list[Finding] = []
    for p, d in host_pairs(plan.instances):
        assert p.host is not None and d.host is not None
        where = pair_name(p, d)
        need, how = need_gbps(plan, model, p, d)
        want = f">= {need:.3g} GB/s ({how})" if need is not None else f"reached ({how})"
        hf = facts.host(p.host.name)
        t = next((x for x in (hf.transfers if hf else ()) if x.decode == d.host.name), None)
        if t is None:
            if run:
                out.append(Finding("WARN", CHECK, where, f"{transport}: not measured", want,
                                   GATHER))
            continue
        if not t.reached:
            why, fix = cause(t)
            out.append(Finding("FAIL", CHECK, where, f"{t.transport or transport}: not "
                               f"reached: {why}", want, fix))
            continue
        found = (f"{t.transport}: {t.gbps:.3g} GB/s, latency {t.latency_us:.0f} us "
                 f"({t.bytes / 2**20:.0f} MiB in {t.seconds:.2f} s)"
                 if t.latency_us is not None else f"{t.transport}: {t.gbps:.3g} GB/s")
        if t.memory:  # sender -> listener: GPU memory where the engines register theirs
            found += f", {t.memory} memory"
        if t.batch:
            found += f", a decode step's pull of {t.batch:,} descriptors in one batch"
        slow = _quote("\n".join(t.logs), PEERMEM_LOG)
        if not t.verified:
            out.append(Finding("FAIL", CHECK, where, found + "; the bytes did not arrive intact",
                               want, "see the recording's transfer file for the agents' logs"))
        elif need is not None and (t.gbps or 0) < need:
            fix = ("the link cannot carry the plan's KV traffic: use RDMA (protocol rdma, "
                   "UCX_TLS with rc), a faster interface, more decode hosts, or fewer req/s")
            out.append(Finding("FAIL", CHECK, where, found, want, fix))
        elif slow:
            out.append(Finding("WARN", CHECK, where, f"{found}; GPUDirect RDMA off: {slow}",
                               want, PEERMEM_FIX))
        else:
            out.append(Finding("PASS", CHECK, where, found, want))
    return out


def group_transfers(plan: Plan, facts: Facts, run: bool = True) -> list[Finding]:
    """One `net.alltoall` finding per multi-node group on hosts: every node exchanged bytes
    with every other over the group's backend (`run_group`)."""
    if plan.on_kubernetes:
        return []
    out: list[Finding] = []
    for leader in plan.instances:
        if not leader.workers or leader.host is None:
            continue
        nodes = 1 + len(leader.workers)
        want = f"all-to-all between the group's {nodes} nodes (its engines' backend)"
        hf = facts.host(leader.host.name)
        t = next((x for x in (hf.group_transfers if hf else ()) if x.decode == leader.name), None)
        if t is None:
            if run:
                out.append(Finding("WARN", "net.alltoall", leader.name, "not measured", want,
                                   GATHER))
            continue
        if not t.reached:
            why, fix = cause(t)
            out.append(Finding("FAIL", "net.alltoall", leader.name,
                               f"{t.transport}: not reached: {why}", want, fix))
            continue
        found = (f"{t.transport}: {t.gbps:.3g} GB/s per node (slowest), latency "
                 f"{t.latency_us or 0:.0f} us ({t.bytes / 2**20:.0f} MiB in {t.seconds:.2f} s)")
        if not t.verified:
            out.append(Finding("FAIL", "net.alltoall", leader.name,
                               found + "; slices arrived wrong", want,
                               "see the recording's group-transfer file for the ranks' logs"))
        else:
            out.append(Finding("PASS", "net.alltoall", leader.name, found, want))
    return out


def rdma_limits(plan: Plan, facts: Facts) -> list[Finding]:
    """`net.rdma` per host of a pair whose KV transfer registers memory with RDMA NICs: the
    locked-memory limit (registration pins the KV buffers) and, with GPU KV buffers, the
    nvidia_peermem module (GPUDirect RDMA), read before any transfer."""
    dis = plan.spec.disaggregation
    if plan.on_kubernetes or not plan.disaggregated or dis is None:
        return []
    gpu = plan.spec.engine.device != "cpu" and dis.kv_buffer_device != "cpu"
    seen: dict[str, Instance] = {}
    for p, d in host_pairs(plan.instances):
        for inst in (p, d):
            seen.setdefault(inst.host.name, inst)
    out: list[Finding] = []
    for name, inst in seen.items():
        assert inst.host is not None
        if not uses_rdma(dis.protocol, dict(inst.env), inst.host.rdma_devices):
            continue
        hf = facts.host(name)
        if hf is None or hf.error:
            continue
        want = "ulimit -l unlimited" + ("; nvidia_peermem loaded (GPUDirect RDMA)" if gpu else "")
        kib = hf.memlock_kib
        parts = ["ulimit -l: " + ("not gathered" if kib is None else "unlimited" if kib < 0
                                  else f"{kib} KiB")]
        status: Status = "PASS"
        fix = ""
        if kib is None:
            status, fix = "WARN", GATHER
        elif kib >= 0:
            status = "FAIL" if kib < g.MEMLOCK_FLOOR_KIB else "WARN"
            fix = MEMLOCK_FIX
        if gpu and hf.peermem is not None:
            parts.append("nvidia_peermem " + ("loaded" if hf.peermem else "not loaded"))
            if not hf.peermem and status == "PASS":
                status, fix = "WARN", PEERMEM_FIX
        out.append(Finding(status, "net.rdma", name, "; ".join(parts), want, fix))
    return out


def probe(
    plan: Plan, options: Options, raw: dict[str, dict[str, str]], local: Callable[[Host], bool],
    step: Step | None = None,
) -> dict[str, dict[str, str]]:
    """Phase 2's pair transfers, then the groups' all-to-all (when asked: options.transfer)."""
    if options.transfer is None:
        return {}
    out = transfer_pairs(plan, options, options.transfer, raw, local, step)
    for name, files in transfer_groups(plan, options, options.transfer, raw, local).items():
        out.setdefault(name, {}).update(files)
    return out


def check(c: PlanCheck) -> list[Finding]:
    out = rdma_limits(c.plan, c.facts)
    out += transfers(c.plan, c.facts, c.model, c.transfer)
    return out + group_transfers(c.plan, c.facts, c.transfer)
