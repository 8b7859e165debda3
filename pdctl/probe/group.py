"""Probes for multi-node groups (I/O; the verdicts are pdctl/check/group.py's).

Per host, added to the host's command list when the spec has a group (probe/command.py):
- `vllm-version.txt`: the vLLM installed in the host's runtime environment (the venv's
  python, or `conda run` in the host's conda env), read from the package metadata without
  importing vLLM;
- `ulimit-l.txt`: the locked-memory limit (KiB or `unlimited`) of a process started the way
  `pdctl up` will start the engines (memlock_command): where they run as systemd units, in a
  transient unit with the rendered units' `LimitMEMLOCK=infinity` (limits.conf does not apply
  to services); else in the SSH login shell, as nohup starts them.

Across hosts, after the per-host probes (`reach`): for each group, a short-lived TCP listener
on the leader's host on the group's rendezvous port (the port `--master-port` /
`--data-parallel-rpc-port` will use, bound on all addresses as torch's TCPStore does), and from
every other node a TCP connect to the leader's peer address and that port, with the route the
kernel picks (`ip -o route get`). A connection that the leader's listener accepts proves the
route, every firewall between the two and the port being free on the leader. It does not prove
NCCL's own data connections (ephemeral ports, or RDMA) work. Then the same for each node's
group guard port (plan/guard.py), from every other node of its group. Nothing stays
listening: a listener exits once every node connected, or after LISTEN_S seconds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from pdctl.facts.group import LISTEN, MEMLOCK, REACH, VLLM_VERSION
from pdctl.plan.model import Instance, Plan
from pdctl.plan.shape import peer_address
from pdctl.render.template import quote, quote_path
from pdctl.spec.model import Host, Spec

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


def _conda(host: Host, spec: Spec, code: str) -> str:
    env = quote(host.conda_env or f"pdctl-vllm-{spec.engine.version}")
    return (
        'c="${CONDA_EXE:-$(command -v conda 2>/dev/null)}"; '
        "for d in ~/miniforge3 ~/mambaforge ~/miniconda3 ~/anaconda3 /opt/conda; do "
        '[ -x "$c" ] || c="$d/bin/conda"; done; '
        f'"$c" run -n {env} python -c {quote(code)}'
    )


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


def group_commands(spec: Spec, host: Host) -> dict[str, str]:
    """file name -> command, for hosts of a spec with multi-node groups."""
    if not has_groups(spec) or host.runtime == "docker":
        return {}
    if host.runtime == "conda":
        version = _conda(host, spec, _VERSION_PY)
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


def reach(plan: Plan, run: Run) -> dict[str, dict[str, str]]:
    """host name -> {LISTEN or REACH: output} for every group on hosts: its leader's rendezvous
    port from every other node, then each node's group guard port (plan/guard.py) from every
    other node, labelled NODE/guard. `run` executes one command on a host (locally or over
    SSH) and returns its output."""
    out: dict[str, dict[str, str]] = {}
    if plan.target != "hosts":
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


def _meet(
    out: dict[str, dict[str, str]],
    run: Run,
    label: str,
    target: Instance,
    nodes: tuple[Instance, ...],
    port: int,
) -> None:
    """A listener on `target`'s host at `port`, and a connect from each of `nodes`' hosts to
    `target`'s peer address, recorded under `label`."""
    assert target.host is not None
    lhost, address = target.host, peer_address(target.host)
    heard: list[str] = []
    command = listen_command(lhost, port, len(nodes))
    listener = threading.Thread(
        target=lambda h, c, into: into.append(run(h, c, LISTEN_S + 30)),
        args=(lhost, command, heard),
    )
    listener.start()
    for node in nodes:
        assert node.host is not None
        text = run(node.host, connect_command(node.host, address, port), CONNECT_S + 30)
        folder = out.setdefault(node.host.name, {})
        folder[REACH] = folder.get(REACH, "") + f"leader {label} {address} {port}\n" + text
    listener.join()
    folder = out.setdefault(lhost.name, {})
    folder[LISTEN] = folder.get(LISTEN, "") + f"group {label}\n" + "".join(heard)
