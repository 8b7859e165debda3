"""The network preflight of phase 2 on hosts: a short-lived transfer from each prefill host to
each decode host with the connector's own transport (I/O; the verdicts are
pdctl/check/transfer.py's, the parsing pdctl/facts/transfer.py's).

Per pair, one at a time (so that no two measurements share a link): the transfer agent
(templates/xfer/, standard-library Python plus the transport's package) is uploaded to a
fresh folder on both hosts; the decode side listens on the decode instance's connector port
at the address the spec gives its host, the prefill side connects and writes into the
listener's memory, both print JSON lines. Bounded: `Bounds.bytes` and `Bounds.seconds`, and
every agent ends itself after seconds + its grace. Cleaned up on every exit path (errors,
Ctrl-C): the agents' process groups are killed and their folders removed. A pair whose
hosts lack an interface the spec names is not tried (skipped, with the reason)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from pdctl.errors import PdctlError, UsageError
from pdctl.facts.transfer import (
    NET_DEVICES,
    host_pairs,
    missing_interfaces,
    parse_net_devices,
    transfer_file,
    transport_of,
)
from pdctl.plan.kv import honours_device_name
from pdctl.plan.model import Instance, Plan
from pdctl.plan.shape import peer_address
from pdctl.preflight.facts import SSH
from pdctl.preflight.run import Bounds, Options
from pdctl.probe.agent_host import AgentHost, open_host
from pdctl.spec.model import Host

AGENT_GRACE_S = 50.0  # the agent's own grace (templates/xfer/agent.py: GRACE_S + CONNECT_S)
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
    if plan.target != "hosts" or plan.phase not in (2, 3) or plan.spec.disaggregation is None:
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
    return args


def header(pair: Pair, bounds: Bounds) -> str:
    assert pair.prefill.host is not None and pair.decode.host is not None
    return json.dumps({
        "event": "pair", "prefill": pair.prefill.host.name, "decode": pair.decode.host.name,
        "transport": pair.transport, "address": pair.address, "port": pair.port,
        "bytes": bounds.bytes, "seconds": bounds.seconds,
    }, sort_keys=True) + "\n"


def skip_reason(pair: Pair, raw: dict[str, dict[str, str]]) -> str:
    """Why the pair cannot be tried: a host unreachable over SSH, or an interface that the
    spec names missing on a host (read from its /sys/class/net before any transfer)."""
    for inst in (pair.prefill, pair.decode):
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
    plan: Plan,
    options: Options,
    bounds: Bounds,
    raw: dict[str, dict[str, str]],
    local: Callable[[Host], bool],
    step: Callable[[str, str], None] | None = None,
) -> dict[str, dict[str, str]]:
    """prefill host name -> {transfer file: recorded text} for every pair."""
    out: dict[str, dict[str, str]] = {}
    for pair in pairs(plan):
        assert pair.prefill.host is not None and pair.decode.host is not None
        name = transfer_file(pair.decode.host.name)
        why = skip_reason(pair, raw)
        if why:
            text = header(pair, bounds) + json.dumps({"event": "skipped", "reason": why}) + "\n"
        else:
            text = run_pair(plan, pair, bounds, lambda h: open_host(h, options, local(h)))
        out.setdefault(pair.prefill.host.name, {})[name] = text
        if step:
            step(pair.prefill.host.name, name)
    return out
