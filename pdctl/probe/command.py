"""The shell commands a probe runs on a host, by the name of the file their output is
recorded in. The same commands run locally and over SSH; no Python is needed on the host."""

from __future__ import annotations

from pdctl.preflight import gpu as gpus_topic
from pdctl.preflight.group import group_commands
from pdctl.preflight.hami import hami_commands
from pdctl.preflight.host import commands as host_commands
from pdctl.preflight.transfer import commands as transfer_commands
from pdctl.spec.model import Host, Spec


def commands(spec: Spec, host: Host, gpus: bool = True) -> dict[str, str]:
    """file name -> shell command, in the order they run."""
    out: dict[str, str] = gpus_topic.commands() if gpus else {}
    out.update(host_commands(spec, host))
    out.update(transfer_commands(spec, host))
    out.update(hami_commands(spec))
    out.update(group_commands(spec, host))  # multi-node groups: vLLM version, memlock
    return out

