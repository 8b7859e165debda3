"""A host's system outside its GPUs: reachability, RDMA devices and their ports, /dev/shm, the
disk of the model cache, listening ports, the runtime (docker, a venv's python and vllm,
conda, the system libraries Mooncake loads) and systemd supervision: the commands (POSIX sh,
locally or over SSH; no Python is needed on the host), their parsers and the checks. Pure."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from pdctl.capacity.memory_features import offload_host_gib
from pdctl.plan.kv import honours_device_name
from pdctl.plan.model import Instance, Plan
from pdctl.plan.router import ENGINE_LIBRARIES, install_hint
from pdctl.preflight.facts import Disk, Docker, HostFacts, Missing, Port
from pdctl.preflight.finding import Finding, HostCheck, Status, gib, gpu_list
from pdctl.render.template import quote, quote_path
from pdctl.spec.model import Host, Spec

HOSTNAME = "hostname.txt"
IB = "sys-class-infiniband.txt"
IB_PORTS = "infiniband-ports.txt"
SHM = "df-shm.txt"
CACHE = "df-cache.txt"
MODEL = "du-model.txt"
DOCKER = "docker-info.json"
CONDA = "conda-version.txt"
PORTS = "ports.txt"
VENV = "venv.txt"
SUPERVISE = "supervise.txt"
LIBS = "libraries.txt"
MEMINFO = "meminfo.txt"
GATHER = "gather it live, or record it with --record"

IB_PORTS_COMMAND = ('for p in /sys/class/infiniband/*/ports/*; do [ -r "$p/state" ] || continue; '
                    'd=${p%/ports/*}; printf "%s %s %s %s\\n" "${d##*/}" "${p##*/}" '
                    '"$(tr -d " " < "$p/state")" "$(cat "$p/link_layer" 2>/dev/null)"; done')

# What systemd supervision needs (docs/phase0-hosts.md): PID 1 systemd, its version, and for
# a non-root user lingering and a user manager that answers. POSIX sh.
SUPERVISE_COMMAND = (
    "if [ -d /run/systemd/system ]; then echo 'pid1 systemd'; else echo 'pid1 other'; fi; "
    "echo \"version $(systemctl --version 2>/dev/null | awk 'NR == 1 {print $2}')\"; "
    'echo "uid $(id -u)"; echo "user $(id -un)"; '
    'echo "linger $(loginctl show-user "$(id -un)" -p Linger --value 2>/dev/null)"; '
    'XDG_RUNTIME_DIR="${XDG_RUNTIME_DIR:-/run/user/$(id -u)}" systemctl --user '
    "show-environment >/dev/null 2>&1 && echo 'manager yes' || echo 'manager no'")


def libraries_command(names: tuple[str, ...]) -> str:
    """`<soname> yes|no` per library: in the linker cache (`ldconfig -p`, also where /sbin is
    not on a user's PATH) or in a folder of LD_LIBRARY_PATH. POSIX sh: the login shell runs it."""
    return ('PATH="$PATH:/sbin:/usr/sbin"; '
            "command -v ldconfig >/dev/null || { echo 'ldconfig: not found'; exit 0; }; "
            "c=$(ldconfig -p 2>/dev/null | awk '{print $1}'); "
            f"for l in {' '.join(quote(n) for n in names)}; do f=no; "
            'if printf \'%s\\n\' "$c" | grep -qxF "$l"; then f=yes; fi; '
            "o=$IFS; IFS=:; for d in ${LD_LIBRARY_PATH:-}; do "
            'if [ -n "$d" ] && [ -e "$d/$l" ]; then f=yes; fi; done; IFS=$o; '
            'echo "$l $f"; done')


def model_dir(spec: Spec, host: Host) -> str:
    """Where the model's files are on the host, shell-quoted."""
    name = spec.model.name
    if name.startswith("/"):
        return quote(name)
    return quote_path(host.hf_cache.rstrip("/") + "/hub/models--" + name.replace("/", "--"))


def nearest(path: str) -> str:
    """Shell: `p` set to `path` (quoted), or its nearest parent that exists (a folder made
    later); no external command, so it ends where dirname is missing too."""
    return (f'p={path}; while [ ! -e "$p" ]; do case "$p" in */*) p=${{p%/*}}; p=${{p:-/}};; '
            '*) p=.;; esac; done; ')


def commands(spec: Spec, host: Host) -> dict[str, str]:
    """file name -> shell command, in the order they run."""
    cache = quote_path(host.hf_cache)
    out = {HOSTNAME: "hostname", IB: "ls -la /sys/class/infiniband", IB_PORTS: IB_PORTS_COMMAND,
           SHM: "df -Pk /dev/shm",
           CACHE: nearest(cache) + 'df -Pk "$p"',
           MODEL: f"du -sk {model_dir(spec, host)} 2>/dev/null || true",
           PORTS: "ss -Htln 2>/dev/null || cat /proc/net/tcp /proc/net/tcp6"}
    if spec.engine.kv_offload is not None:  # the host memory the offload tier takes
        out[MEMINFO] = "grep -E '^(MemTotal|MemAvailable):' /proc/meminfo"
    dis = spec.disaggregation
    if spec.disaggregated and dis is not None and dis.connector == "mooncake":
        out[LIBS] = libraries_command(ENGINE_LIBRARIES)
    if host.runtime != "docker" and host.supervise != "none":
        out[SUPERVISE] = SUPERVISE_COMMAND
    if host.runtime == "docker":
        out[DOCKER] = "docker info --format '{{json .}}'"
    elif host.runtime == "venv" and host.venv:
        v = quote_path(host.venv)
        out[VENV] = (
            f'v={v}; "$v/bin/python" --version 2>&1 || echo "python: missing"; '
            'if [ -x "$v/bin/vllm" ]; then echo "vllm: $v/bin/vllm"; else echo "vllm: missing"; fi')
    elif host.runtime == "conda":
        out[CONDA] = ("if command -v conda >/dev/null; then conda --version; exit; fi; "
                      "for c in ~/miniforge3 ~/miniconda3 ~/anaconda3 /opt/conda; do "
                      'if [ -x "$c/bin/conda" ]; then "$c/bin/conda" --version; exit; fi; done; '
                      "echo 'conda: command not found' >&2; exit 127")
    return out


def fields(raw: dict[str, str]) -> tuple[dict[str, Any], list[Missing]]:
    """HostFacts fields from the outputs, and what is missing."""
    missing: list[Missing] = []
    rdma = None
    if IB in raw:
        rdma = parse_ib_listing(raw[IB])
    elif IB + ".err" in raw:
        rdma = ()  # no /sys/class/infiniband: no RDMA devices
    else:
        missing.append(Missing(IB, "not gathered"))
    docker = None
    if DOCKER in raw:
        docker = parse_docker_info(raw[DOCKER])
        if not docker.ok and raw.get(DOCKER + ".err"):
            docker = Docker(ok=False, error=command_failure(raw[DOCKER + ".err"]))
    elif DOCKER + ".err" in raw:
        docker = Docker(ok=False, error=command_failure(raw[DOCKER + ".err"]))
    conda = parse_conda(raw[CONDA]) if CONDA in raw else None
    if conda is None and CONDA + ".err" in raw:
        conda = ""
    for n in (SHM, CACHE, PORTS):
        if n not in raw:
            missing.append(Missing(n, failure(raw, n) or "not gathered"))
    libraries = parse_libraries(raw[LIBS]) if LIBS in raw else None
    if libraries is None:
        why = "no ldconfig on the host" if LIBS in raw else failure(raw, LIBS) or "not gathered"
        missing.append(Missing(LIBS, why))
    return {
        "hostname": raw.get(HOSTNAME, "").strip(), "rdma_devices": rdma,
        "rdma_ports": parse_ib_ports(raw[IB_PORTS]) if raw.get(IB_PORTS) else (),
        "shm": parse_df(raw[SHM]) if raw.get(SHM) else None,
        "cache_disk": parse_df(raw[CACHE]) if raw.get(CACHE) else None,
        "model_cached_kib": parse_du(raw[MODEL]) if MODEL in raw else None, "docker": docker,
        "conda": conda, "conda_error": _conda_error(raw),
        "venv": raw[VENV].strip() if VENV in raw else None,
        "supervise": raw[SUPERVISE].strip() if SUPERVISE in raw else None,
        "listening": parse_listening(raw[PORTS]) if PORTS in raw else None, "libraries": libraries,
        "mem_available_kib": parse_meminfo(raw[MEMINFO]) if MEMINFO in raw else None}, missing


def failure(raw: dict[str, str], name: str) -> str:
    if name + ".err" in raw:
        return command_failure(raw[name + ".err"])
    return ""


def _conda_error(raw: dict[str, str]) -> str:
    err = raw.get(CONDA + ".err", "")
    if "not-on-path" in err:
        path = err.split("not-on-path", 1)[1].split()[0]
        return f"{path} exists but conda is not on the PATH of non-interactive shells"
    return failure(raw, CONDA)


def parse_libraries(text: str) -> tuple[tuple[str, bool], ...] | None:
    """`<soname> yes|no` lines of the library probe; None when it found no ldconfig."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        if parts[:1] == ["ldconfig:"]:
            return None
        if len(parts) == 2 and parts[1] in ("yes", "no"):
            out.append((parts[0], parts[1] == "yes"))
    return tuple(out)


def parse_ib_listing(text: str) -> tuple[str, ...]:
    """`ls -la /sys/class/infiniband` (or plain `ls`): the device names."""
    names = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("total "):
            continue
        fields = line.split()
        if len(fields) >= 9 and fields[0][:1] in "dl-":
            name = line.split(" -> ")[0].split()[-1]
        elif len(fields) == 1:
            name = fields[0]
        else:
            continue
        if name not in (".", ".."):
            names.append(name)
    return tuple(sorted(names))


def parse_ib_ports(text: str) -> tuple[Port, ...]:
    """Lines `<device> <port> <state file> <link_layer>`, e.g. `mlx5_0 1 4:ACTIVE InfiniBand`
    (what pdctl's probe prints from /sys/class/infiniband/*/ports/*)."""
    ports = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 3 or not fields[1].isdigit():
            continue
        state = fields[2].split(":")[-1].strip().upper()
        ports.append(Port(fields[0], int(fields[1]), state, fields[3] if len(fields) > 3 else ""))
    return tuple(ports)


def parse_df(text: str) -> Disk | None:
    """`df -Pk PATH`: the filesystem holding PATH (sizes in KiB)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    for line in lines[1:]:
        fields = line.split()
        if len(fields) >= 6 and fields[1].isdigit() and fields[3].isdigit():
            return Disk(mount=" ".join(fields[5:]), total_kib=int(fields[1]),
                        avail_kib=int(fields[3]))
    return None


def parse_meminfo(text: str) -> int | None:
    """MemAvailable (KiB) from /proc/meminfo lines; None when absent."""
    m = re.search(r"^MemAvailable:\s+(\d+)\s*kB", text, re.MULTILINE)
    return int(m.group(1)) if m else None


def parse_du(text: str) -> int | None:
    """`du -sk PATH`: KiB used (None when nothing was printed: the path does not exist)."""
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0].isdigit():
            return int(fields[0])
    return None


def parse_docker_info(text: str) -> Docker:
    """`docker info --format '{{json .}}'`."""
    try:
        data = json.loads(text.strip().splitlines()[-1] if text.strip() else "{}")
    except (json.JSONDecodeError, IndexError):
        return Docker(ok=False, error="docker info printed no JSON")
    errors = data.get("ServerErrors") or []
    if errors or not data.get("ServerVersion"):
        return Docker(ok=False, error="; ".join(errors) or "no docker daemon answered")
    runtimes = tuple(sorted((data.get("Runtimes") or {}).keys()))
    return Docker(ok=True, version=str(data.get("ServerVersion", "")), runtimes=runtimes,
                  default_runtime=str(data.get("DefaultRuntime", "")))


def parse_conda(text: str) -> str:
    """`conda --version` -> '24.7.1' ('' when absent)."""
    m = re.search(r"conda\s+(\S+)", text)
    return m.group(1) if m else ""


def parse_listening(text: str) -> tuple[int, ...]:
    """TCP ports in LISTEN state, from `ss -Htln` or /proc/net/tcp{,6}."""
    ports: set[int] = set()
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if re.match(r"^\d+:$", fields[0]) and len(fields) > 3:  # /proc/net/tcp
            if fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
        elif fields[0] == "LISTEN" and len(fields) >= 4:  # ss -Htln
            tail = fields[3].rsplit(":", 1)
            if len(tail) == 2 and tail[1].isdigit():
                ports.add(int(tail[1]))
    return tuple(sorted(ports))


def command_failure(text: str) -> str:
    """A short reason from a recorded failure file (`<name>.err`: 'exit N' then stderr)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        return "failed"
    status, rest = lines[0], lines[1:]
    msg = rest[0] if rest else ""
    if status == "exit 127" or "command not found" in msg or "not found" in msg.lower():
        return f"not installed ({msg})" if msg else "not installed"
    return f"{status}: {msg}" if msg else status


# A parser per file, each run alone first: an output it cannot read is named, never raised.
PARSERS: dict[str, Callable[[str], object]] = {
    IB: parse_ib_listing, IB_PORTS: parse_ib_ports, DOCKER: parse_docker_info,
    CONDA: parse_conda, LIBS: parse_libraries, SHM: parse_df, CACHE: parse_df, MODEL: parse_du,
    PORTS: parse_listening}


def reach(host: Host, hf: HostFacts | None) -> list[Finding]:
    if hf is None:
        return [Finding("FAIL", "host.facts", host.name, "no facts for this host",
                        "a folder named after the host in the recording",
                        "record it: pdctl preflight SPEC --record DIR")]
    if hf.error:
        return [Finding("FAIL", "host.reach", host.name, hf.error, "an SSH connection",
                        "check address, port, user and key; known_hosts must hold its key")]
    return []


def shm(host: Host, hf: HostFacts, instances: list[Instance]) -> list[Finding]:
    tp = max((i.tensor_parallel for i in instances), default=1)
    need_gib = max(1, tp)
    want = f">= {need_gib} GiB (1 GiB per tensor-parallel rank)"
    if hf.shm is None:
        return [Finding("WARN", "host.shm", host.name, "/dev/shm: " + hf.why_missing("df-shm.txt"),
                        want, GATHER)]
    size = hf.shm.total_kib
    if size < need_gib * 1024**2:
        status: Status = "FAIL" if tp > 1 and size < 256 * 1024 else "WARN"
        return [Finding(status, "host.shm", host.name, f"/dev/shm {gib(size)}", want,
                        "mount -o remount,size=16G /dev/shm (NCCL and vLLM use it)")]
    return [Finding("PASS", "host.shm", host.name, f"/dev/shm {gib(size)}", want)]


def runtime(host: Host, hf: HostFacts, plan: Plan) -> list[Finding]:
    """The environment the units run in: the Python runtime, then the system libraries."""
    return _python(host, hf, plan) + libraries(host, hf, plan) + supervision(host, hf)


def supervision(host: Host, hf: HostFacts) -> list[Finding]:
    """Who keeps a process unit running: systemd (system units for root, user units with
    lingering otherwise) or, where it cannot, nohup (supervise: auto) or a refusal (systemd)."""
    if host.runtime == "docker" or host.supervise == "none" or hf.supervise is None:
        return []
    got = dict(line.partition(" ")[::2] for line in hf.supervise.splitlines())
    version = got.get("version", "").strip()
    want = "systemd as PID 1" + ("" if got.get("uid") == "0" else ", lingering for the user")
    why = ""
    if got.get("pid1") != "systemd":
        why = "systemd is not PID 1"
    elif got.get("uid") != "0" and got.get("linger", "").strip() != "yes":
        why = f"lingering is off for {got.get('user', '?')}"
    elif got.get("uid") != "0" and got.get("manager", "").strip() != "yes":
        why = "the user's systemd manager does not answer"
    if why:
        status: Status = "FAIL" if host.supervise == "systemd" else "WARN"
        fix = (f"sudo loginctl enable-linger {got.get('user', 'USER')}" if "linger" in why
               else "accept nohup (nothing restarts an engine that dies), or run on a systemd host")
        return [Finding(status, "host.supervise", host.name, f"{why}: units run under nohup"
                        if status == "WARN" else why, want, fix)]
    scope = "system units" if got.get("uid") == "0" else f"user units of {got.get('user')}"
    steps = "" if version.isdigit() and int(version) >= 254 else " (no RestartSteps: fixed backoff)"
    return [Finding("PASS", "host.supervise", host.name, f"systemd {version}: {scope}{steps}",
                    want)]


def libraries(host: Host, hf: HostFacts, plan: Plan) -> list[Finding]:
    """The system libraries the Mooncake wheels load on this host, even for protocol tcp."""
    need = plan.libraries_on(host.name)
    if not need:
        return []
    want = ", ".join(need) + " (mooncake-transfer-engine loads them, even for protocol tcp)"
    if hf.libraries is None:
        return [Finding("WARN", "host.libs", host.name,
                        "system libraries: " + hf.why_missing(LIBS), want, GATHER)]
    found = dict(hf.libraries)
    missing = [lib for lib in need if found.get(lib) is False]
    unknown = [lib for lib in need if lib not in found]
    if missing:
        return [Finding("FAIL", "host.libs", host.name, "missing: " + ", ".join(missing), want,
                        install_hint(missing))]
    if unknown:
        return [Finding("WARN", "host.libs", host.name, "not checked: " + ", ".join(unknown),
                        want, GATHER)]
    return [Finding("PASS", "host.libs", host.name, "found: " + ", ".join(need), want)]


def _python(host: Host, hf: HostFacts, plan: Plan) -> list[Finding]:
    if host.runtime == "docker":
        d = hf.docker
        if d is None:
            return [Finding("WARN", "host.runtime", host.name, "docker: not gathered",
                            "docker with the NVIDIA runtime", GATHER)]
        if not d.ok:
            return [Finding("FAIL", "host.runtime", host.name, f"docker: {d.error}",
                            "a running docker daemon the SSH user may use",
                            "install docker, start it, add the user to group docker")]
        if "nvidia" not in d.runtimes:
            return [Finding("WARN", "host.runtime", host.name,
                            f"docker {d.version}, runtimes {', '.join(d.runtimes) or 'none'}",
                            "the nvidia runtime (nvidia-container-toolkit) for --gpus",
                            "install nvidia-container-toolkit; nvidia-ctk runtime configure "
                            "--runtime=docker; restart docker")]
        return [Finding("PASS", "host.runtime", host.name,
                        f"docker {d.version} with runtime nvidia", "docker + nvidia runtime")]
    if host.runtime == "conda":
        if hf.conda is None:
            return [Finding("WARN", "host.runtime", host.name, "conda: not gathered", "conda",
                            GATHER)]
        if hf.conda_error or not hf.conda:
            return [Finding("FAIL", "host.runtime", host.name,
                            f"conda: {hf.conda_error or 'not found'}",
                            "conda on the PATH of non-interactive SSH shells",
                            "install Miniforge and put its bin on PATH (e.g. in ~/.bashrc "
                            "before the interactive check), or use runtime docker or venv")]
        return [Finding("PASS", "host.runtime", host.name, f"conda {hf.conda}", "conda")]
    if host.runtime == "venv" and host.venv:
        want = f"a Python environment at {host.venv} with bin/vllm"
        if hf.venv is None:
            return [Finding("WARN", "host.runtime", host.name, "venv: not gathered", want, GATHER)]
        python = hf.venv.splitlines()[0] if hf.venv else ""
        if "python: missing" in hf.venv or not python.startswith("Python"):
            return [Finding("WARN", "host.runtime", host.name, f"no Python at {host.venv}", want,
                            "create it (python3 -m venv) and pip install the pinned vllm")]
        if "vllm: missing" in hf.venv:
            return [Finding("WARN", "host.runtime", host.name,
                            f"{python} at {host.venv}, no bin/vllm", want,
                            f"{host.venv}/bin/pip install {plan.release.pip}")]
        return [Finding("PASS", "host.runtime", host.name, f"{python} with vllm", want)]
    return []


def spec_ports(plan: Plan, host: str) -> dict[int, str]:
    """Every port the plan's firewall list gives `host` that a spec field sets (port -> the
    field, e.g. 29000 -> router.metricsPort): the router's Prometheus port and the Mooncake
    master's ports as much as the engines'. vllm-router panics on a taken --prometheus-port
    after it started (`up` then fails ~30 s later); ranges pdctl does not choose (ephemeral,
    Mooncake's random handshake ports) are left out."""
    out: dict[int, str] = {}
    for rule in plan.ports:
        if rule.host != host or not rule.source:
            continue
        first, _, last = rule.ports.partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            continue
        lo, hi = int(first), int(last or first)
        if hi - lo < 64:
            for p in range(lo, hi + 1):
                out.setdefault(p, rule.source)
    return out


def ports(host: Host, hf: HostFacts, instances: list[Instance],
          extra: tuple[int, ...] = (), named: dict[int, str] | None = None) -> list[Finding]:
    """The host's listening ports against every port the deployment will bind there:
    the engines' (and their extra ports), `extra`, and `named` (port -> spec field,
    spec_ports), which a taken port is reported with."""
    named = named or {}
    wanted = sorted({p for i in instances for p in (i.port, *(q for _, q in i.extra_ports))}
                    | set(extra) | set(named))
    if not wanted:
        return []
    if hf.listening is None:
        return [Finding("WARN", "host.ports", host.name, "ports: " + hf.why_missing("ports.txt"),
                        f"ports {gpu_list(wanted)} free", GATHER)]
    taken = [p for p in wanted if p in hf.listening]
    if taken:
        shown = ", ".join(f"{p} ({named[p]})" if p in named else str(p) for p in taken)
        fields = sorted({named[p] for p in taken if p in named})
        return [Finding("FAIL", "host.ports", host.name, f"in use: {shown}",
                        f"ports {gpu_list(wanted)} free",
                        "stop what listens there (`pdctl down` if it is this deployment) or "
                        "change the port in the spec"
                        + (f" ({', '.join(fields)})" if fields else ""))]
    return [Finding("PASS", "host.ports", host.name, f"ports {gpu_list(wanted)} free",
                    f"ports {gpu_list(wanted)} free")]


def rdma(host: Host, hf: HostFacts, plan: Plan, instances: list[Instance]) -> list[Finding]:
    d = plan.spec.disaggregation
    if d is None or d.protocol != "rdma" or not any(i.role in ("prefill", "decode")
                                                    for i in instances):
        return []
    want = "an RDMA device with an ACTIVE port"
    names = [n.strip() for n in (d.device_name or "").split(",") if n.strip()]
    ignored = ""
    if names and d.connector == "mooncake" and not honours_device_name(plan.spec.engine.version):
        # vLLM up to 0.24.0 passes "" as the device to Mooncake (plan/kv.py): what it uses
        # is what Mooncake finds, narrowed by MC_TE_FILTERS in the engines' environment
        ignored = (f"vLLM {plan.spec.engine.version}'s MooncakeConnector ignores deviceName "
                   f"{d.device_name} (it passes \"\" to the transfer engine; read from 0.25.0 "
                   "on): Mooncake picks among the RDMA NICs it finds")
        env = dict(instances[0].env) if instances else {}
        names = [n.strip() for n in env.get("MC_TE_FILTERS", "").split(",") if n.strip()]
    if names:
        want = f"RDMA device {', '.join(names)} with an ACTIVE port"
    if hf.rdma_devices is None:
        return [Finding("WARN", "host.rdma", host.name, "RDMA devices: not gathered", want, GATHER)]
    active = sorted({p.device for p in hf.rdma_ports if p.state == "ACTIVE"})
    ok = [n for n in (names or active) if n in active]
    found = (f"devices {', '.join(hf.rdma_devices)}; active: {', '.join(active) or 'none'}"
             if hf.rdma_devices else "no RDMA devices (/sys/class/infiniband empty)")
    if not ok or (names and len(ok) < len(names)):
        return [Finding("WARN", "host.rdma", host.name, found + (f"; {ignored}" if ignored else ""),
                        want, "set disaggregation.protocol: tcp, or bring an RDMA port up")]
    if ignored:
        return [Finding("WARN", "host.rdma", host.name, f"{found}; {ignored}", want,
                        f"restrict them with MC_TE_FILTERS={d.device_name} in engine.env, or "
                        "pin engine.version 0.25.0 or later (docs/phase2-bare-metal.md)")]
    return [Finding("PASS", "host.rdma", host.name, found, want)]


def disk(host: Host, hf: HostFacts, weights: int | None) -> list[Finding]:
    if weights is None:
        return []
    cached = (hf.model_cached_kib or 0) * 1024
    need = max(0, int(weights * 1.05) - cached)
    want = f">= {gib(need, 'B')} free for the model ({gib(weights, 'B')} of weights"
    want += f", {gib(cached, 'B')} cached)" if cached else ")"
    if hf.cache_disk is None:
        return [Finding("WARN", "host.disk", host.name,
                        "model cache disk: " + hf.why_missing("df-cache.txt"), want, GATHER)]
    avail = hf.cache_disk.avail_kib * 1024
    found = f"{gib(avail, 'B')} free on {hf.cache_disk.mount}"
    if avail < need:
        return [Finding("FAIL", "host.disk", host.name, found, want,
                        "free space or point hosts[].hfCache at a larger disk")]
    return [Finding("PASS", "host.disk", host.name, found, want)]


# Host memory kept free beside the offload tier (pdctl's margin, not vLLM's): the engine
# processes' own host memory (Python, CUDA context, pinned staging buffers) grows with it
OFFLOAD_MARGIN_GIB = 4.0
OFFLOAD_MARGIN_SHARE = 0.10


def offload_memory(host: Host, hf: HostFacts, plan: Plan) -> list[Finding]:
    """engine.kvOffload: the host's MemAvailable against the tiers of the engines it holds
    (capacity.memory_features.offload_host_gib) plus a margin."""
    off = plan.spec.engine.kv_offload
    if off is None:
        return []

    tier = (offload_host_gib(plan.spec) or {}).get(host.name, 0.0)
    if tier <= 0:
        return []
    need = tier + max(OFFLOAD_MARGIN_GIB, tier * OFFLOAD_MARGIN_SHARE)
    want = (
        f">= {need:.1f} GiB available: {tier:.1f} GiB of KV offload tiers "
        f"(engine.kvOffload.sizeGib {off.size_gib:g} per engine) + {need - tier:.1f} GiB margin")
    if hf.mem_available_kib is None:
        return [Finding("WARN", "host.memory", host.name,
                        "MemAvailable: " + hf.why_missing(MEMINFO), want, GATHER)]
    avail = hf.mem_available_kib / 1024**2
    found = f"MemAvailable {avail:.1f} GiB"
    if avail < need:
        room = max(0.0, avail - max(OFFLOAD_MARGIN_GIB, avail * OFFLOAD_MARGIN_SHARE))
        per = room * off.size_gib / tier
        status: Status = "FAIL" if avail < tier else "WARN"
        return [Finding(status, "host.memory", host.name, found, want,
                        f"lower engine.kvOffload.sizeGib to {per:.0f} or less, or free host "
                        "memory (the engines pin the whole tier at start)")]
    return [Finding("PASS", "host.memory", host.name, found, want)]


def check_host(c: HostCheck) -> list[Finding]:
    """RDMA devices, /dev/shm, the runtime, the disk and the ports of one host."""
    host, hf, insts = c.host, c.facts, c.instances
    out = rdma(host, hf, c.plan, insts)
    out += shm(host, hf, insts)
    out += runtime(host, hf, c.plan)
    out += disk(host, hf, c.weights)
    out += offload_memory(host, hf, c.plan)
    services = tuple(s.port for s in c.plan.services if s.host.name == host.name)
    return out + ports(host, hf, insts, services, spec_ports(c.plan, host.name))
