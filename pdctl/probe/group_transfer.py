"""The all-to-all of each multi-node group on hosts (I/O; verdicts in check/transfer.py):
after the rendezvous reach probe (probe/group.py), every node of the group runs the transfer
agent's `group` transport at once: torch.distributed over the group's rendezvous port on the
leader's peer address, with the backend the engines use (nccl on GPUs, gloo on CPU engines)
and each node's transport variables (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME, NCCL_IB_HCA),
then one all_to_all_single after another within the bounds. Recorded in the leader host's
folder as `group-transfer-GROUP.jsonl`; cleaned up like the pair transfers."""

from __future__ import annotations

import json
from collections.abc import Callable

from pdctl.errors import PdctlError, UsageError
from pdctl.facts.transfer import NET_DEVICES, group_file, missing_interfaces, parse_net_devices
from pdctl.plan.model import Instance, Plan
from pdctl.plan.shape import peer_address
from pdctl.preflight.facts import SSH
from pdctl.preflight.group import rendezvous_port
from pdctl.preflight.run import Bounds, Options
from pdctl.probe.agent_host import AgentHost, open_host
from pdctl.probe.transfer import AGENT_GRACE_S, agent_env, failure, tag
from pdctl.spec.model import Host


def backend(plan: Plan) -> str:
    return "gloo" if plan.spec.engine.device == "cpu" else "nccl"


def groups(plan: Plan) -> list[tuple[Instance, int]]:
    """(leader, rendezvous port) of every multi-node group on hosts."""
    if plan.target != "hosts":
        return []
    out = []
    for leader in plan.instances:
        port = rendezvous_port(leader)
        if leader.workers and port is not None and leader.host is not None:
            out.append((leader, port))
    return out


def _skip(nodes: tuple[Instance, ...], raw: dict[str, dict[str, str]]) -> str:
    for node in nodes:
        assert node.host is not None
        files = raw.get(node.host.name, {})
        if SSH in files:
            return f"{node.host.name} unreachable over SSH"
        if NET_DEVICES in files:
            present = parse_net_devices(files[NET_DEVICES])
            absent = missing_interfaces(agent_env(node), node.host.network_interface, present)
            if absent:
                return (f"interface: {absent[0]} names no interface on {node.host.name} "
                        f"(it has {', '.join(present) or 'none'})")
    return ""


def run_group(plan: Plan, leader: Instance, port: int, bounds: Bounds,
              opener: Callable[[Host], AgentHost], raw: dict[str, dict[str, str]]) -> str:
    nodes = (leader, *leader.workers)
    assert leader.host is not None
    address = peer_address(leader.host)
    text = json.dumps({
        "event": "group", "group": leader.name, "backend": backend(plan), "address": address,
        "port": port, "nodes": [n.host.name for n in nodes if n.host is not None],
        "bytes": bounds.bytes, "seconds": bounds.seconds,
    }, sort_keys=True) + "\n"
    why = _skip(nodes, raw)
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


def transfer_groups(
    plan: Plan, options: Options, bounds: Bounds, raw: dict[str, dict[str, str]],
    local: Callable[[Host], bool],
) -> dict[str, dict[str, str]]:
    """leader host name -> {group transfer file: recorded text}."""
    out: dict[str, dict[str, str]] = {}
    for leader, port in groups(plan):
        assert leader.host is not None
        text = run_group(plan, leader, port, bounds,
                         lambda h: open_host(h, options, local(h)), raw)
        out.setdefault(leader.host.name, {})[group_file(leader.name)] = text
    return out
