"""A running hosts deployment read over the SSH connections `up` uses (fleet.py): each
instance's HTTP port through SSH port forwarding (as the health probe reaches the engines), the
engines' log tails, the GPU probe run with the host's python3; for `pdctl bench`, a command
on a host and the deployment's API key."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pdctl.plan.model import Plan
from pdctl.plan.router import engine_url
from pdctl.render.bundle import Bundle
from pdctl.targets.base import Endpoint, Reply, Telemetry
from pdctl.targets.health import http_request, unanswered
from pdctl.targets.hosts.fleet import Fleet
from pdctl.targets.ssh import Result
from pdctl.targets.state import desired_units


def host_endpoints(plan: Plan, bundle: Bundle) -> list[Endpoint]:
    """Every engine unit with a port, and the router's metrics port (pure)."""
    insts = {i.name: i for i in plan.instances}
    out = []
    for d in desired_units(plan, bundle):
        if d.role == "router":
            out.append(
                Endpoint(d.name, "router", d.host.name, plan.spec.router.metrics_port, d.address)
            )
            continue
        inst = insts.get(d.name)
        if inst is None or d.port is None:
            continue
        gpus = tuple((d.host.name, g) for g in inst.gpus)
        out.append(
            Endpoint(d.name, d.role, d.host.name, d.port, d.address, inst.max_num_seqs, gpus)
        )
    return sorted(out, key=lambda e: (e.role != "router", e.role, e.name))


def router_workers(plan: Plan) -> dict[str, tuple[str, str]]:
    """The engine URLs the router is given (plan.router.engine_url) -> (instance, role)."""
    return {
        engine_url(i): (i.name, i.role)
        for i in plan.instances
        if i.role in ("prefill", "decode") and i.host is not None
    }


@dataclass
class HostsObserver:
    plan: Plan
    bundle: Bundle
    fleet: Fleet
    endpoints: list[Endpoint] = field(default_factory=list)
    workers: dict[str, tuple[str, str]] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.endpoints = host_endpoints(self.plan, self.bundle)
        self.workers = router_workers(self.plan)
        self.fleet.connect(tolerate=True)
        self.unreachable = self.fleet.unreachable

    def close(self) -> None:
        self.fleet.close()

    def request(self, e: Endpoint, path: str, method: str = "GET", body: bytes = b"",
                headers: dict[str, str] | None = None, timeout: float = 10.0) -> Reply:
        ops = self.fleet.ops.get(e.where)
        if ops is None:
            return Reply(0, f"host {e.where} unreachable", time.monotonic())
        try:
            channel = ops.conn.open_channel(e.port, e.address)
            status, text = http_request(
                channel, method, path, body, timeout=timeout, headers=headers
            )
        except Exception as exc:  # refused, reset, timeout, host lost
            why = unanswered(exc, f"{e.address}:{e.port} on {e.where}")
            return Reply(0, f"{path}: no answer ({why})", time.monotonic())
        return Reply(status, text, time.monotonic())

    def logs(self, lines: int = 2000) -> dict[str, str]:
        """One exec per host; '' where a host or a log cannot be read."""
        by_host: dict[str, list[str]] = {}
        for e in self.endpoints:
            if e.role != "router" and e.where in self.fleet.ops:
                by_host.setdefault(e.where, []).append(e.name)

        def one(host: str) -> dict[str, str]:
            try:
                return self.fleet.ops[host].tails(by_host[host], lines, missing_ok=True)
            except Exception:  # a host lost meanwhile: its scrape says so
                return {}

        out: dict[str, str] = {}
        for got in self.fleet.map(one, sorted(by_host)):
            out.update(got)
        return out

    def gpus(self, command: str, window_s: float) -> list[Telemetry]:
        hosts = [h.name for h in self.plan.hosts_used() if h.name in self.fleet.ops]

        def one(name: str) -> Telemetry:
            try:
                res = self.fleet.ops[name].conn.run(
                    command, timeout=window_s + 60, step="reading GPU telemetry"
                )
            except Exception as exc:
                return Telemetry(name, failed=f"{name}: GPU telemetry: {exc}")
            return Telemetry(name, res.out)

        return self.fleet.map(one, hosts)

    # -- pdctl bench: hosts only (capabilities.commands); folder: the deployment's on `host`
    def run(self, host: str, script: str, timeout: float, step: str) -> Result:
        return self.fleet.ops[host].conn.run(script, timeout=timeout, step=step)

    def folder(self, host: str) -> str:
        return self.fleet.ops[host].dir

    def api_key(self, host: str) -> str | None:
        return self.fleet.ops[host].api_key()
