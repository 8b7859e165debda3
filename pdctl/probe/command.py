"""The shell commands a probe runs on a host, by the name of the file their output is
recorded in. The same commands run locally and over SSH; no Python is needed on the host."""

from __future__ import annotations

from pdctl.facts import host as f
from pdctl.facts.group import MEMLOCK
from pdctl.facts.transfer import NET_DEVICES, PEERMEM, uses_rdma
from pdctl.plan.router import ENGINE_LIBRARIES
from pdctl.preflight.hami import hami_commands
from pdctl.probe.group import group_commands, memlock_command
from pdctl.render.template import quote, quote_path
from pdctl.spec.model import Host, Spec

FIELDS = "index,uuid,name,memory.total,memory.used,driver_version,pci.bus_id,mig.mode.current"
QUERY = (
    f"nvidia-smi --query-gpu={FIELDS},mig.mode.pending,compute_cap --format=csv"
    f" || nvidia-smi --query-gpu={FIELDS} --format=csv"
)
IB_PORTS = (
    'for p in /sys/class/infiniband/*/ports/*; do [ -r "$p/state" ] || continue; '
    'd=${p%/ports/*}; printf "%s %s %s %s\\n" "${d##*/}" "${p##*/}" '
    '"$(tr -d " " < "$p/state")" "$(cat "$p/link_layer" 2>/dev/null)"; done'
)

# What systemd supervision needs (docs/phase0-hosts.md): PID 1 systemd, its version, and for
# a non-root user lingering and a user manager that answers. POSIX sh.
SUPERVISE_COMMAND = (
    "if [ -d /run/systemd/system ]; then echo 'pid1 systemd'; else echo 'pid1 other'; fi; "
    "echo \"version $(systemctl --version 2>/dev/null | awk 'NR == 1 {print $2}')\"; "
    'echo "uid $(id -u)"; echo "user $(id -un)"; '
    'echo "linger $(loginctl show-user "$(id -un)" -p Linger --value 2>/dev/null)"; '
    'XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/run/user/$(id -u)}" systemctl --user '
    "show-environment >/dev/null 2>&1 && echo 'manager yes' || echo 'manager no'"
)

NET_DEVICES_COMMAND = (
    'for d in /sys/class/net/*; do [ -e "$d" ] || continue; '
    'printf "%s %s\n" "${d##*/}" "$(cat "$d/operstate" 2>/dev/null)"; done'
)


def libraries_command(names: tuple[str, ...]) -> str:
    """`<soname> yes|no` per library: in the linker cache (`ldconfig -p`, also where /sbin is
    not on a user's PATH) or in a folder of LD_LIBRARY_PATH. POSIX sh: the login shell runs it."""
    return (
        'PATH="$PATH:/sbin:/usr/sbin"; '
        "command -v ldconfig >/dev/null || { echo 'ldconfig: not found'; exit 0; }; "
        "c=$(ldconfig -p 2>/dev/null | awk '{print $1}'); "
        f"for l in {' '.join(quote(n) for n in names)}; do f=no; "
        'if printf \'%s\\n\' "$c" | grep -qxF "$l"; then f=yes; fi; '
        "o=$IFS; IFS=:; for d in ${LD_LIBRARY_PATH:-}; do "
        'if [ -n "$d" ] && [ -e "$d/$l" ]; then f=yes; fi; done; IFS=$o; '
        'echo "$l $f"; done'
    )


def model_dir(spec: Spec, host: Host) -> str:
    """Where the model's files are on the host, shell-quoted."""
    name = spec.model.name
    if name.startswith("/"):
        return quote(name)
    return quote_path(host.hf_cache.rstrip("/") + "/hub/models--" + name.replace("/", "--"))


def commands(spec: Spec, host: Host, gpus: bool = True) -> dict[str, str]:
    """file name -> shell command, in the order they run."""
    cache = quote_path(host.hf_cache)
    out: dict[str, str] = {f.HOSTNAME: "hostname"}
    if gpus:
        out.update(
            {
                f.SMI: "nvidia-smi",
                f.QUERY: QUERY,
                f.TOPO: "nvidia-smi topo -m",
                f.P2P_R: "nvidia-smi topo -p2p r",
                f.P2P_W: "nvidia-smi topo -p2p w",
                f.NVLINK: "nvidia-smi nvlink -s",
                f.MIG_PROFILES: "nvidia-smi mig -lgip",
                f.PROC: "cat /proc/driver/nvidia/version",
            }
        )
    out.update(
        {
            f.IB: "ls -la /sys/class/infiniband",
            f.IB_PORTS: IB_PORTS,
            f.SHM: "df -Pk /dev/shm",
            f.CACHE: f'p={cache}; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; df -Pk "$p"',
            f.MODEL: f"du -sk {model_dir(spec, host)} 2>/dev/null || true",
            f.PORTS: "ss -Htln 2>/dev/null || cat /proc/net/tcp /proc/net/tcp6",
        }
    )
    dis = spec.disaggregation
    if spec.phase in (2, 3) and dis is not None:
        out[NET_DEVICES] = NET_DEVICES_COMMAND  # the network preflight's interfaces
        if uses_rdma(dis.protocol, dict(spec.engine.env), host.rdma_devices):
            out[MEMLOCK] = memlock_command(host)  # RDMA registers (pins) the KV buffers
            out[PEERMEM] = "if [ -d /sys/module/nvidia_peermem ]; then echo loaded; " \
                "else echo absent; fi"
    if spec.phase in (2, 3) and dis is not None and dis.connector == "mooncake":
        out[f.LIBS] = libraries_command(ENGINE_LIBRARIES)
    out.update(hami_commands(spec))
    out.update(group_commands(spec, host))  # multi-node groups: vLLM version, memlock
    if host.runtime != "docker" and host.supervise != "none":
        out[f.SUPERVISE] = SUPERVISE_COMMAND
    if host.runtime == "docker":
        out[f.DOCKER] = "docker info --format '{{json .}}'"
    elif host.runtime == "venv" and host.venv:
        v = quote_path(host.venv)
        out[f.VENV] = (
            f'v={v}; "$v/bin/python" --version 2>&1 || echo "python: missing"; '
            'if [ -x "$v/bin/vllm" ]; then echo "vllm: $v/bin/vllm"; else echo "vllm: missing"; fi'
        )
    elif host.runtime == "conda":
        out[f.CONDA] = (
            "if command -v conda >/dev/null; then conda --version; exit; fi; "
            "for c in ~/miniforge3 ~/miniconda3 ~/anaconda3 /opt/conda; do "
            'if [ -x "$c/bin/conda" ]; then "$c/bin/conda" --version; exit; fi; done; '
            "echo 'conda: command not found' >&2; exit 127"
        )
    return out


def prefix(path: tuple[str, ...] = ()) -> str:
    """What every command starts with: C locale, and extra PATH entries when asked."""
    text = "export LC_ALL=C; "
    if path:
        text += "export PATH=" + ":".join(quote_path(p) for p in path) + ':"$PATH"; '
    return text
