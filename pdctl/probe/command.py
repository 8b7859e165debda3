"""The shell commands a probe runs on a host, by the name of the file their output is
recorded in. The same commands run locally and over SSH; no Python is needed on the host."""

from __future__ import annotations

from pdctl.facts.transfer import NET_DEVICES, PEERMEM, uses_rdma
from pdctl.preflight import gpu as gpus_topic
from pdctl.preflight.group import MEMLOCK, group_commands, memlock_command
from pdctl.preflight.hami import hami_commands
from pdctl.preflight.host import commands as host_commands
from pdctl.spec.model import Host, Spec

NET_DEVICES_COMMAND = (
    'for d in /sys/class/net/*; do [ -e "$d" ] || continue; '
    'printf "%s %s\n" "${d##*/}" "$(cat "$d/operstate" 2>/dev/null)"; done'
)


def commands(spec: Spec, host: Host, gpus: bool = True) -> dict[str, str]:
    """file name -> shell command, in the order they run."""
    out: dict[str, str] = gpus_topic.commands() if gpus else {}
    out.update(host_commands(spec, host))
    dis = spec.disaggregation
    if spec.phase in (2, 3) and dis is not None:
        out[NET_DEVICES] = NET_DEVICES_COMMAND  # the network preflight's interfaces
        if uses_rdma(dis.protocol, dict(spec.engine.env), host.rdma_devices):
            out[MEMLOCK] = memlock_command(host)  # RDMA registers (pins) the KV buffers
            out[PEERMEM] = "if [ -d /sys/module/nvidia_peermem ]; then echo loaded; " \
                "else echo absent; fi"
    out.update(hami_commands(spec))
    out.update(group_commands(spec, host))  # multi-node groups: vLLM version, memlock
    return out

