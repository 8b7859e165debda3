"""Multi-node groups (plan/group.py): the probes, their parsers and the checks.

Per host, added to the host's command list when the spec has a group (`commands`):
- `vllm-version.txt`: the vLLM installed in the host's runtime environment (the venv's
  python, or `conda run` in the host's conda env), read from the package metadata without
  importing vLLM;
- `ulimit-l.txt`: the locked-memory limit (KiB or `unlimited`, its last line, after a line
  `context WHERE`) of a process started the way `pdctl up` will start the engines
  (memlock_command): where they run as systemd units, in a transient unit with the rendered
  units' `LimitMEMLOCK=infinity` (limits.conf does not apply to services); else in the SSH
  login shell, as nohup starts them.

Across hosts, after the per-host probes (`reach`, the one part here that does I/O, through
the `run` it is given): for each group, a short-lived TCP listener on the leader's host on the
group's rendezvous port (the port `--master-port` / `--data-parallel-rpc-port` will use, bound
on all addresses as torch's TCPStore does), and from every other node a TCP connect to the
leader's peer address and that port, with the route the kernel picks (`ip -o route get`). A
connection that the leader's listener accepts proves the route, every firewall between the two
and the port being free on the leader. It does not prove NCCL's own data connections
(ephemeral ports, or RDMA) work. Then the same for each node's group guard port
(plan/guard.py), from every other node of its group. Nothing stays listening: a listener exits
once every node connected, or after LISTEN_S seconds. Recorded as
- `group-reach.txt` (a group's other nodes): per group, `leader NAME ADDRESS PORT`, the route
  (`route ...`) and `connected ADDRESS PORT` or `failed ADDRESS PORT ERRNO`;
- `group-listen.txt` (the leader's host): per group, `group NAME`, then `listening PORT` and
  one `accepted ADDRESS` per connection, or `bind-error PORT REASON`.

The checks (pure, (plan, facts) -> findings): the nodes of one group must match (driver, CUDA,
GPU model, Python environment, the vLLM version: a mismatch hangs or fails NCCL at start-up,
see docs/multinode.md), every headless node's host gets the per-host checks its leader's host
gets (GPUs, driver, shared memory, ports, runtime), the RDMA devices a host names for NCCL must
exist with an ACTIVE port, the locked-memory limit of RDMA hosts, and every node reaches its
leader's rendezvous port and every other node's group guard port.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any, NamedTuple

from pdctl.plan.model import Instance, Plan
from pdctl.plan.shape import peer_address
from pdctl.preflight import gpu as gpu_topic
from pdctl.preflight import host as h
from pdctl.preflight.facts import SSH, Facts, HostFacts, Listen, Missing, Reach
from pdctl.preflight.finding import Finding, PlanCheck, Status
from pdctl.preflight.run import Options, Step, prefix, run_local_command, run_ssh_command
from pdctl.render.template import quote, quote_path
from pdctl.spec.model import Host, Spec

VLLM_VERSION = "vllm-version.txt"
MEMLOCK = "ulimit-l.txt"
REACH = "group-reach.txt"
LISTEN = "group-listen.txt"
GATHER = "run `pdctl preflight` against the hosts (or record their facts with `pdctl probe`)"


LISTEN_S = 15.0  # the listener's lifetime at most
CONNECT_S = 10.0  # how long a node retries while the listener starts (connection refused)

_VERSION_PY = 'import importlib.metadata as m; print(m.version("vllm"))'
_LISTEN_PY = """
import socket, sys, time
port, want, life = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
try:
    s.bind(("", port))
    s.listen(64)
except OSError as e:
    print("bind-error", port, e.strerror)
    sys.exit(0)
print("listening", port, flush=True)
end, got = time.time() + life, 0
while got < want and time.time() < end:
    s.settimeout(max(0.05, end - time.time()))
    try:
        c, a = s.accept()
    except OSError:
        break
    print("accepted", a[0], flush=True)
    c.close()
    got += 1
"""
_CONNECT_PY = """
import errno, socket, sys, time
host, port, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
end = time.time() + wait
while True:
    try:
        socket.create_connection((host, port), timeout=3).close()
        print("connected", host, port)
        break
    except OSError as e:
        why = errno.errorcode.get(e.errno or 0, "ETIMEDOUT")
        if why != "ECONNREFUSED" or time.time() > end:
            print("failed", host, port, why)
            break
        time.sleep(0.2)
"""


def has_groups(spec: Spec) -> bool:
    sections = (spec.serve, spec.prefill, spec.decode)
    return any(s is not None and getattr(s, "nodes", 1) > 1 for s in sections)


# sets $c to conda: $CONDA_EXE, the PATH's, else the usual install folders' (POSIX sh)
FIND_CONDA = (
    'c="${CONDA_EXE:-$(command -v conda 2>/dev/null)}"; for d in ~/miniforge3 ~/mambaforge '
    '~/miniconda3 ~/anaconda3 /opt/conda; do [ -x "$c" ] || c="$d/bin/conda"; done')


def conda_env(host: Host, spec: Spec) -> str:
    """The host's conda environment (the one `pdctl up` makes by default), shell-quoted."""
    return quote(host.conda_env or f"pdctl-vllm-{spec.engine.version}")


def python(host: Host) -> str:
    """The runtime environment's python (venv), else the login shell's python3."""
    if host.runtime == "venv" and host.venv:
        return quote_path(host.venv.rstrip("/") + "/bin/python")
    return "python3"


# POSIX sh (the login shell runs it). A first line `context WHERE`, then the limit. Where
# `pdctl up` would install systemd units (templates/systemd-start.sh.j2: PID 1 systemd; root, or a
# lingering user), `systemd-run --wait --pipe` runs `ulimit -l` in a transient unit with the
# rendered units' LimitMEMLOCK=infinity, which systemd lowers to its manager's hard limit where
# it cannot raise it; without a transient unit (a user manager with no D-Bus), that hard limit
# read from the manager's /proc/PID/limits; else the login shell's, as nohup runs the engines.
_MEMLOCK_UNIT = r"""w=; v=; s=; m=
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then s=--system; w='a system unit'; m=1
  elif [ "$(loginctl show-user "$(id -un)" -p Linger --value 2>/dev/null)" = yes ]; then
    s=--user; w="a user unit of $(id -un)"
    export XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/run/user/$(id -u)}"
    m=$(pgrep -u "$(id -u)" -x systemd 2>/dev/null | head -n 1)
  fi
fi
if [ -n "$w" ]; then
  v=$(timeout 30 systemd-run "$s" --wait --pipe --quiet --collect -p LimitMEMLOCK=infinity \
    sh -c 'ulimit -l' </dev/null 2>/dev/null) || v=
  if [ -z "$v" ] && [ -n "$m" ]; then
    v=$(awk '/^Max locked memory/ {print $5}' "/proc/$m/limits" 2>/dev/null)
    case $v in unlimited|'') ;; *) v=$((v / 1024)) ;; esac
    w="$w, its service manager's hard limit"
  fi
fi
if [ -z "$v" ]; then w='the login shell'; v=$(ulimit -l); fi
echo "context $w"; echo "$v"
"""


def memlock_command(host: Host) -> str:
    """The locked-memory limit the host's engines will get (see _MEMLOCK_UNIT)."""
    if host.runtime == "docker" or host.supervise == "none":
        return "echo 'context the login shell'; ulimit -l"
    return _MEMLOCK_UNIT


def commands(spec: Spec, host: Host) -> dict[str, str]:
    """file name -> command, for hosts of a spec with multi-node groups."""
    if not has_groups(spec) or host.runtime == "docker":
        return {}
    if host.runtime == "conda":
        env = conda_env(host, spec)
        version = f'{FIND_CONDA}; "$c" run -n {env} python -c {quote(_VERSION_PY)}'
    else:
        version = f"{python(host)} -c {quote(_VERSION_PY)}"
    return {VLLM_VERSION: version, MEMLOCK: memlock_command(host)}


def rendezvous_port(inst: Instance) -> int | None:
    """The group's rendezvous port from the leader's flags."""
    for flag in ("--master-port", "--data-parallel-rpc-port"):
        if flag in inst.args:
            return int(inst.args[inst.args.index(flag) + 1])
    return None


def listen_command(host: Host, port: int, nodes: int) -> str:
    return f"{python(host)} -c {quote(_LISTEN_PY)} {port} {nodes} {LISTEN_S:g}"


def connect_command(host: Host, leader: str, port: int) -> str:
    route = f"ip -o route get {quote(leader)} 2>&1 | head -1 | sed 's/^/route /' || true"
    return f"{route}; {python(host)} -c {quote(_CONNECT_PY)} {quote(leader)} {port} {CONNECT_S:g}"


Run = Callable[[Host, str, float], str]  # (host, command, timeout) -> stdout and stderr


def reach_all(plan: Plan, run: Run) -> dict[str, dict[str, str]]:
    """host name -> {LISTEN or REACH: output} for every group on hosts: its leader's rendezvous
    port from every other node, then each node's group guard port (plan/guard.py) from every
    other node, labelled NODE/guard. `run` executes one command on a host (locally or over
    SSH) and returns its output."""
    out: dict[str, dict[str, str]] = {}
    if plan.on_kubernetes:
        return out
    for leader in plan.instances:
        port = rendezvous_port(leader)
        if not leader.workers or port is None or leader.host is None:
            continue
        _meet(out, run, leader.name, leader, leader.workers, port)
        nodes = (leader, *leader.workers)
        for node in nodes:
            guard = dict(node.extra_ports).get("guard")
            if guard is not None:
                others = tuple(n for n in nodes if n is not node)
                _meet(out, run, f"{node.name}/guard", node, others, guard)
    return out


def _meet(out: dict[str, dict[str, str]], run: Run, label: str, target: Instance,
          nodes: tuple[Instance, ...], port: int) -> None:
    """A listener on `target`'s host at `port`, and a connect from each of `nodes`' hosts to
    `target`'s peer address, recorded under `label`."""
    assert target.host is not None
    lhost, address = target.host, peer_address(target.host)

    heard: list[str] = []
    command = listen_command(lhost, port, len(nodes))
    listener = threading.Thread(target=lambda h, c, into: into.append(run(h, c, LISTEN_S + 30)),
                                args=(lhost, command, heard))
    listener.start()
    for node in nodes:
        assert node.host is not None
        text = run(node.host, connect_command(node.host, address, port), CONNECT_S + 30)
        folder = out.setdefault(node.host.name, {})
        folder[REACH] = folder.get(REACH, "") + f"leader {label} {address} {port}\n" + text
    listener.join()
    folder = out.setdefault(lhost.name, {})
    folder[LISTEN] = folder.get(LISTEN, "") + f"group {label}\n" + "".join(heard)


def probe(
    plan: Plan, options: Options, raw: dict[str, dict[str, str]], local: Callable[[Host], bool],
    step: Step | None = None,
) -> dict[str, dict[str, str]]:
    """`reach` over the hosts' SSH (or locally for local hosts), skipping groups with a host
    that could not be reached at all (its ssh.err says why)."""
    down = {name for name, files in raw.items() if SSH in files}

    def run(host: Host, command: str, timeout: float) -> str:
        if host.name in down:
            return "error host unreachable over SSH\n"
        text = prefix(options.remote_path) + command
        if local(host):
            return run_local_command(text, timeout)
        return run_ssh_command(host, text, options, timeout)

    return reach_all(plan, run)


_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?\S*$")


def parse_version(text: str) -> str:
    """The last line that looks like a version ('' when none: vLLM missing, an error)."""
    lines = [x.strip() for x in text.splitlines() if _VERSION.match(x.strip())]
    return lines[-1] if lines else ""


def parse_memlock(text: str) -> int | None:
    """KiB, -1 for unlimited, None when unreadable."""
    word = text.strip().splitlines()[-1].strip() if text.strip() else ""
    if word == "unlimited":
        return -1
    return int(word) if word.isdigit() else None


def parse_memlock_where(text: str) -> str:
    """Where the limit was measured ('' in a recording made before pdctl said so)."""
    for line in text.splitlines():
        if line.startswith("context "):
            return line[len("context ") :].strip()
    return ""


def parse_reach(text: str) -> tuple[Reach, ...]:
    out: list[Reach] = []
    head: list[str] | None = None
    route, rest = "", list[str]()
    for line in text.splitlines() + ["leader"]:
        words = line.split()
        if not words:
            continue
        if words[0] == "leader":
            if head is not None and len(head) == 4 and head[3].isdigit():
                result = next((r for r in rest if r), "error: no answer")
                out.append(Reach(head[1], head[2], int(head[3]), result, route))
            head, route, rest = words, "", []
        elif words[0] == "route":
            # `ip -o` joins its continuation lines with a backslash: keep the first
            route = line.split(None, 1)[1].split("\\")[0].strip() if len(words) > 1 else ""
        elif words[0] == "connected":
            rest.append("connected")
        elif words[0] == "failed" and len(words) >= 4:
            rest.append(words[3])
        else:
            rest.append("error: " + line.strip()[:200])
    return tuple(out)


def parse_listen(text: str) -> tuple[Listen, ...]:
    out: list[Listen] = []
    group, port, accepted, error = "", 0, 0, ""
    for line in text.splitlines() + ["group"]:
        words = line.split()
        if not words:
            continue
        if words[0] == "group":
            if group:
                out.append(Listen(group, port, accepted, error or ("" if port else "no answer")))
            group = words[1] if len(words) > 1 else ""
            port, accepted, error = 0, 0, ""
        elif words[0] == "listening" and len(words) > 1 and words[1].isdigit():
            port = int(words[1])
        elif words[0] == "accepted":
            accepted += 1
        elif words[0] == "bind-error" and len(words) > 1 and words[1].isdigit():
            port, error = int(words[1]), " ".join(words[2:]) or "bind failed"
        else:
            error = error or line.strip()[:200]
    return tuple(out)


def fields(raw: dict[str, str]) -> tuple[dict[str, Any], list[Missing]]:
    """HostFacts fields from a host's raw outputs (None: not gathered)."""
    return {
        "vllm_version": parse_version(raw[VLLM_VERSION]) if VLLM_VERSION in raw else None,
        "memlock_kib": parse_memlock(raw[MEMLOCK]) if MEMLOCK in raw else None,
        "memlock_where": parse_memlock_where(raw.get(MEMLOCK, "")),
        "reach": parse_reach(raw.get(REACH, "")), "listen": parse_listen(raw.get(LISTEN, ""))}, []


# RDMA registers (pins) host memory, which counts against RLIMIT_MEMLOCK; NCCL over InfiniBand
# and UCX (NIXL) are run with it unlimited (OFED's and NVIDIA's container guides:
# `ulimit -l unlimited`, `docker run --ulimit memlock=-1`). Below 1 GiB even NCCL's own IB
# buffers may not register; a finite limit above it is named as a risk.
MEMLOCK_FLOOR_KIB = 1 << 20

_WHY = {"ENETUNREACH": "no route to the leader's address",
        "EHOSTUNREACH": "the leader's address does not answer (no host, or a firewall rejects)",
        "ETIMEDOUT": "no answer: a firewall drops the packets, or the address is wrong",
        "ECONNREFUSED": "refused: a firewall rejects the port, or the leader's listener failed"}


def _nodes(leader: Instance) -> tuple[Instance, ...]:
    return (leader, *leader.workers)


def vllm_versions(leader: Instance, facts: Facts) -> list[Finding]:
    """The vLLM of every node's runtime environment is one version (nodes of different
    versions fail or hang at the rendezvous: docs/multinode.md)."""
    seen: dict[str, str | None] = {}
    for node in _nodes(leader):
        assert node.host is not None
        hf = facts.host(node.host.name)
        seen[node.host.name] = None if hf is None or hf.error else hf.vllm_version
    if all(v is None for v in seen.values()):
        return []
    found = "; ".join(f"{host}: {v or 'not found'}" for host, v in seen.items())
    want = "one vLLM version on every node"
    if any(v is None for v in seen.values()):
        return [Finding("WARN", "group.vllm", leader.name, found, want, GATHER)]
    if "" in seen.values():
        fix = "install the pinned vLLM in every node's runtime environment (pdctl up does)"
        return [Finding("WARN", "group.vllm", leader.name, found, want, fix)]
    if len(set(seen.values())) > 1:
        fix = "install one vLLM version on every node: mixed versions fail at the rendezvous"
        return [Finding("FAIL", "group.vllm", leader.name, found, want, fix)]
    return [Finding("PASS", "group.vllm", leader.name, found, want)]


def memlock(node: Instance, hf: HostFacts) -> list[Finding]:
    """`ulimit -l` where the host names RDMA devices for NCCL."""
    assert node.host is not None
    if not node.host.rdma_devices:
        return []
    where, want = node.host.name, "locked memory (ulimit -l) unlimited for RDMA"
    kib = hf.memlock_kib
    if kib is None:
        return [Finding("WARN", "group.memlock", where, "ulimit -l: not gathered", want, GATHER)]
    # Where memlock_command measured it: the context the engines will run in (named when that
    # is a systemd unit, whose limit is not the login shell's).
    unit = hf.memlock_where not in ("", "the login shell")
    ctx = f" (in {hf.memlock_where})" if unit else ""
    if kib < 0:
        return [Finding("PASS", "group.memlock", where, f"ulimit -l: unlimited{ctx}", want)]
    found = f"ulimit -l: {kib} KiB{ctx}"
    status: Status = "FAIL" if kib < MEMLOCK_FLOOR_KIB else "WARN"
    fix = memlock_fix(hf.memlock_where, where)
    return [Finding(status, "group.memlock", where, found, want, fix)]


def memlock_fix(context: str, host: str) -> str:
    """How to raise the limit where the engines run: limits.conf applies to login sessions (and
    nohup'd engines), never to systemd services; a unit's LimitMEMLOCK=infinity (pdctl's units
    say it) is capped by its manager's hard limit."""
    if context.startswith("a user unit"):
        return ("raise the user manager's hard limit on " + host + ": `LimitMEMLOCK=infinity` in a "
                "drop-in for user@.service (`sudo systemctl edit user@.service`), then restart "
                "user@UID.service or reboot; or run pdctl as root (system units)")
    if context.startswith("a system unit"):
        return ("systemd itself cannot raise it on " + host + " (PID 1 without CAP_SYS_RESOURCE, "
                "e.g. in a container): raise the hard limit of the machine or container (`docker "
                "run --ulimit memlock=-1`) that runs it")
    return ("set `* soft memlock unlimited` and `* hard memlock unlimited` in "
            "/etc/security/limits.conf (or LimitMEMLOCK=infinity for a service) on " + host)


def reach(leader: Instance, facts: Facts) -> list[Finding]:
    """Every other node connected to a short-lived listener on its leader's rendezvous port
    (`reach_all`): the route and every firewall between them let that port through, and
    the port is free on the leader."""
    port = Meeting(
        "group.reach", leader.name, "rendezvousPort", "the group's rendezvous", "the leader", True)
    return met(port, leader, leader.workers, facts)


def guards(leader: Instance, facts: Facts) -> list[Finding]:
    """Each node's group guard port (plan/guard.py) reached from every other node of the
    group, and free on the node's host. Only where the rendezvous port was probed (a recording
    made before guards has no guard probes: group.reach says `not probed` already)."""
    assert leader.host is not None
    lf = facts.host(leader.host.name)
    if not any(x.group == leader.name for x in (lf.listen if lf and not lf.error else ())):
        return []
    nodes = (leader, *leader.workers)
    out: list[Finding] = []
    for node in nodes:
        if "guard" in dict(node.extra_ports):
            label = f"{node.name}/guard"
            guard = Meeting("group.guard", label, "guardPort", "its group guard", node.name, False)
            out += met(guard, node, tuple(n for n in nodes if n is not node), facts)
    return out


class Meeting(NamedTuple):
    check: str  # the finding's check id
    label: str  # the probes' group label
    field: str  # the spec field that moves the port
    what: str  # what listens there
    to: str  # how a finding names the node that listens ("the leader", a node's name)
    nccl_route: bool  # WARN when the route leaves off the node's networkInterface (NCCL's)


def met(m: Meeting, target: Instance, nodes: tuple[Instance, ...], facts: Facts) -> list[Finding]:
    """Findings of one listener on `target`'s host and the connects of `nodes` to it."""
    assert target.host is not None
    there = target.host.name
    tf = facts.host(there)
    listens = [x for x in (tf.listen if tf and not tf.error else ()) if x.group == m.label]
    out: list[Finding] = []
    tried = [r for node in nodes
             if node.host is not None and (hf := facts.host(node.host.name)) and not hf.error
             for r in hf.reach if r.group == m.label]
    for x in listens:
        if not x.error:
            continue
        want = f"port {x.port} free on {there} for {m.what}"
        fix = f"free port {x.port} on {there}, or set {m.field}"
        if tried and all(r.result == "connected" for r in tried):
            # something answers there already: this group running (preflight after up)?
            fix = f"if {target.name} is running already, nothing to do; else {fix}"
            out.append(Finding("WARN", m.check, there, x.error, want, fix))
        else:
            out.append(Finding("FAIL", m.check, there, x.error, want, fix))
    for node in nodes:
        assert node.host is not None
        hf = facts.host(node.host.name)
        tries = [r for r in (hf.reach if hf and not hf.error else ()) if r.group == m.label]
        where = node.host.name
        if not tries:
            want = f"{where} reaches {target.name}'s {m.what} port"
            out.append(Finding("WARN", m.check, where, "not probed", want, GATHER))
            continue
        for r in tries:
            want = f"{where} connects to {m.to} {r.address}:{r.port}"
            via = f" (route: {r.route})" if r.route else ""
            found = f"{r.result}{via}"
            if r.result != "connected":
                why = _WHY.get(r.result, r.result).replace("the leader", m.to)
                fix = (f"{why}: let {where} reach {r.address} on TCP {r.port} (firewall, routes), "
                       f"or give {there} an addressForPeers that {where} reaches")
                out.append(Finding("FAIL", m.check, where, found, want, fix))
                continue
            ifname = node.host.network_interface
            if m.nccl_route and ifname and r.device and r.device != ifname:
                fix = (f"the route to the leader leaves through {r.device}, but NCCL/Gloo use "
                       f"{ifname} (networkInterface): use the leader's address on {ifname}'s "
                       "network as its addressForPeers, or fix networkInterface")
                out.append(Finding("WARN", m.check, where, found, want, fix))
                continue
            out.append(Finding("PASS", m.check, where, found, want))
    return out


# Link bandwidths (GB/s, one direction, per host or per GPU for NVLink) the traffic figures
# use: NVLink 4 (H100/H200: 900 GB/s per GPU), 4 x 400 Gb/s InfiniBand NDR (one NIC per two
# GPUs, 200 GB/s per host), one 100 Gb/s Ethernet port (12.5 GB/s).
NVLINK_GBS, IB_GBS, ETHERNET_GBS = 900.0, 200.0, 12.5


def _gpu_model(hf: HostFacts, gpus: tuple[int, ...]) -> str:
    names = sorted({g.name for g in hf.gpus or () if not gpus or g.index in gpus})
    return ", ".join(names)


def _python(hf: HostFacts) -> str:
    return (hf.venv or "").strip().splitlines()[0] if hf.venv else ""


def same_across(leader: Instance, facts: Facts, gpu: bool) -> list[Finding]:
    """One finding per property: equal on every node of the group, or FAIL naming each."""
    nodes = (leader, *leader.workers)
    known: list[tuple[Instance, HostFacts]] = []
    for node in nodes:
        assert node.host is not None
        hf = facts.host(node.host.name)
        if hf is None or hf.error:
            return [Finding("WARN", "group.same", leader.name, f"no facts from {node.host.name}",
                            "facts from every node of the group", GATHER)]
        known.append((node, hf))
    props = [("Python environment", lambda n, f: _python(f))]
    if gpu:
        props = [("NVIDIA driver", lambda n, f: f.driver), ("CUDA version", lambda n, f: f.cuda),
                 ("GPU model", lambda n, f: _gpu_model(f, n.gpus)), *props]
    out = []
    for what, value in props:
        seen = {n.host.name: value(n, f) for n, f in known if n.host is not None}
        values = set(seen.values())
        found = "; ".join(f"{host}: {v or 'unknown'}" for host, v in seen.items())
        want = f"one {what} on every node"
        if "" in values:
            out.append(Finding("WARN", "group.same", leader.name, found, want, GATHER))
        elif len(values) > 1:
            fix = (f"give every node of {leader.name} the same {what}: nodes that differ hang "
                   "or fail when NCCL/Gloo first connect")
            out.append(Finding("FAIL", "group.same", leader.name, found, want, fix))
        else:
            out.append(Finding("PASS", "group.same", leader.name, found, want))
    return out


def rdma_devices(node: Instance, hf: HostFacts) -> list[Finding]:
    """The host's `rdmaDevices` (NCCL_IB_HCA) exist with an ACTIVE port."""
    assert node.host is not None
    names = node.host.rdma_devices
    if not names:
        return []
    want = f"RDMA devices {', '.join(names)} with an ACTIVE port (NCCL_IB_HCA)"
    where = node.host.name
    if hf.rdma_devices is None:
        return [Finding("WARN", "group.rdma", where, "RDMA devices: not gathered", want, GATHER)]
    active = sorted({p.device for p in hf.rdma_ports if p.state == "ACTIVE"})
    missing = [n for n in names if n not in active]
    found = (f"devices {', '.join(hf.rdma_devices)}; active: {', '.join(active) or 'none'}"
             if hf.rdma_devices
             else "no RDMA devices (/sys/class/infiniband empty)")
    if missing:
        fix = f"bring {', '.join(missing)} up, or drop it from hosts[].rdmaDevices"
        return [Finding("FAIL", "group.rdma", where, found, want, fix)]
    return [Finding("PASS", "group.rdma", where, found, want)]


def worker_host(plan: Plan, node: Instance, hf: HostFacts, gpu: bool) -> list[Finding]:
    """The per-host checks for a headless node (plan.instances holds leaders only)."""
    assert node.host is not None
    index = next(i for i, x in enumerate(plan.spec.hosts) if x.name == node.host.name)
    out: list[Finding] = []
    if gpu and node.gpus:
        out += gpu_topic.gpus(node.host, hf, [node], index)
        out += gpu_topic.driver(node.host, hf, plan)
        out += gpu_topic.mig(node.host, hf, [node])
    out += h.shm(node.host, hf, [node])
    out += h.runtime(node.host, hf, plan)
    out += h.ports(node.host, hf, [node])
    return out


def traffic(plan: Plan, leader: Instance, model: Any) -> list[Finding]:
    """The bytes per generated token that cross the network between a group's nodes, and what
    they cost at the link's bandwidth (docs/multinode.md). TP across nodes: every layer's two
    all-reduces (ring: 2(T-1)/T of the hidden state each); PP across nodes: the hidden state
    once per stage boundary; data parallel with expert parallel: the all-to-all dispatch and
    combine of each token's top-k experts in every MoE layer."""
    if model is None:
        return []
    section = getattr(plan.spec, leader.role)
    tp, pp = leader.tensor_parallel, getattr(section, "pipeline_parallel", 1)
    dp, nodes = getattr(section, "data_parallel", 1), 1 + len(leader.workers)
    act = 4 if plan.spec.model.dtype in ("float", "float32") else 2
    hosts = [n.host for n in (leader, *leader.workers) if n.host is not None]
    rdma = all(host.rdma_devices for host in hosts)
    link, link_name = (IB_GBS, "InfiniBand/RoCE") if rdma else (ETHERNET_GBS, "100 Gb/s Ethernet")
    if dp > 1:
        if not model.is_moe or not section.expert_parallel:
            return []
        moe_layers = model.layers - model.dense_layers
        per_token = 2 * model.experts_per_token * model.hidden * act * moe_layers
        top = model.experts_per_token
        what = f"EP all-to-all over {nodes} nodes ({moe_layers} MoE layers, top-{top})"
        crossing = per_token * (nodes - 1) / nodes
    else:
        per_node = tp * pp // nodes
        if tp > per_node:  # tensor-parallel groups span nodes
            per_token = 2 * 2 * (tp - 1) / tp * model.hidden * act * model.layers
            what = f"TP {tp} across {nodes} nodes (2 all-reduces x {model.layers} layers)"
            crossing = per_token
        else:
            crossing = model.hidden * act * (nodes - 1)
            what = f"PP across {nodes} nodes (the hidden state at {nodes - 1} stage boundaries)"
    ms = crossing / (link * 1e9) * 1e3
    nvlink_ms = crossing / (NVLINK_GBS * 1e9) * 1e3
    found = (f"{what}: {crossing / 1e6:.2f} MB per token between nodes = {ms:.3f} ms per token "
             f"at {link_name} ({link:g} GB/s) vs {nvlink_ms:.4f} ms over NVLink "
             f"({NVLINK_GBS / link:.0f}x slower)")
    want = "no tensor-parallel traffic between nodes"
    if dp == 1 and tp > tp * pp // nodes:
        fix = ("keep TP inside a host (tensorParallel <= GPUs per node) and split across hosts "
               "with pipelineParallel"
               + ("" if rdma else "; give the hosts RDMA NICs (hosts[].rdmaDevices)"))
        return [Finding("WARN", "group.traffic", leader.name, found, want, fix)]
    return [Finding("PASS", "group.traffic", leader.name, found, want)]


def group_checks(plan: Plan, facts: Facts, model: Any = None) -> list[Finding]:
    """Every finding about multi-node groups on hosts ([] when there is none)."""
    if plan.on_kubernetes:
        return []
    gpu = plan.spec.engine.device != "cpu"
    leaders = [i for i in plan.instances if i.workers]
    out: list[Finding] = []
    checked: set[str] = set()
    for leader in leaders:
        out += same_across(leader, facts, gpu)
        out += vllm_versions(leader, facts)
        out += reach(leader, facts)
        out += guards(leader, facts)
        out += traffic(plan, leader, model)
        for node in (leader, *leader.workers):
            assert node.host is not None
            hf = facts.host(node.host.name)
            if hf is None or hf.error:
                continue
            if node.host.name not in checked:
                checked.add(node.host.name)
                out += rdma_devices(node, hf)
                out += memlock(node, hf)
            if node.leader:
                out += worker_host(plan, node, hf, gpu)
    return out


def check(c: PlanCheck) -> list[Finding]:
    return group_checks(c.plan, c.facts, c.model)
