"""Where `pdctl top`'s figures come from: the deployment's target observes it
(`Target.observe()`, pdctl/targets/<kind>/observe.py: hosts over SSH port forwarding, Docker
engines from where pdctl runs, Kubernetes pods through the API server's proxy); this module
reads the answers into figures: each instance's /metrics as a Snapshot, the GPU telemetry
(the GPU probe's output, or dcgm-exporter's metrics) as GpuLoads with the roles using each."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from pdctl.targets import open_target
from pdctl.targets.base import Endpoint, Observer
from pdctl.top.gpu import GpuLoad, parse_dcgm, parse_probe, probe_command
from pdctl.top.metrics import Snapshot, parse
from pdctl.top.router import readiness
from pdctl.top.window import assemble

if TYPE_CHECKING:
    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle
    from pdctl.targets.base import Connect
    from pdctl.top.window import Window


def gpu_roles(plan: Plan) -> dict[tuple[str, int], tuple[str, ...]]:
    roles: dict[tuple[str, int], set[str]] = {}
    for inst in plan.instances:
        if inst.host is not None:
            for g in inst.gpus:
                roles.setdefault((inst.host.name, g), set()).add(inst.role)
    return {k: tuple(sorted(v)) for k, v in roles.items()}


def open_source(plan: Plan, bundle: Bundle, options: Connect) -> Source:
    """The running deployment of `plan` through its target (pdctl.targets.open_target picks
    it); `close()` when done."""
    return Source(plan, open_target(plan, bundle, options).observe())


@dataclass
class Source:
    """The observer's figures; its endpoints, workers, unreachable, logs(lines) (what
    top/kv_events.py scans) and close() are the observer's own."""

    plan: Plan
    observer: Observer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.observer, name)

    def window(self, first: dict[str, Snapshot], last: dict[str, Snapshot],
               gpus: list[GpuLoad], missing: list[str]) -> Window:
        """The deployment's figures between two scrapes (top.window.assemble)."""
        p, seen = self.plan, self.observer
        return assemble(p.name, p.phase, p.target, seen.endpoints, first, last, gpus, missing,
                        seen.workers)

    def names(self) -> dict[str, str]:
        """Engine address (URL and host:port, as vllm-router names it) -> instance name."""
        out: dict[str, str] = {}
        for url, (name, _role) in self.observer.workers.items():
            out[url] = out[url.split("://", 1)[-1]] = name
        return out

    def scrape(self) -> dict[str, Snapshot]:
        def one(e: Endpoint) -> tuple[str, Snapshot]:
            got = self.observer.request(e, "/metrics")  # status 0: no answer, the text says why
            why = got.text if not got.status else f"/metrics answered {got.status}"
            ok = got.status == 200
            return e.name, parse(got.text, got.at) if ok else Snapshot(got.at, (), why)

        with ThreadPoolExecutor(max(1, min(8, len(self.endpoints)))) as pool:
            return dict(pool.map(one, self.endpoints))

    def router_readiness(self) -> dict[str, dict[str, tuple[int, int]]]:
        """Each running router's own view of its workers (`GET /readiness` on its port, as
        top.router.readiness reads it): router unit -> role -> (healthy, total); a router
        that does not answer, or answers without counts, is left out."""
        out = {}
        for u in self.plan.units:
            if u.role != "router" or u.port is None or u.health_path is None:
                continue
            got = self.observer.request(Endpoint(u.name, u.role, u.host.name, u.port, u.address),
                                        "/readiness")
            view = readiness(got.status, got.text) if got.status else None
            if view is not None:
                out[u.name] = view
        return out

    def gpus(self, window_s: float) -> tuple[list[GpuLoad], list[str]]:
        """Every host's GPUs over `window_s` seconds (blocks that long), and what is missing."""
        roles = gpu_roles(self.plan)
        start = time.monotonic()
        gpus: list[GpuLoad] = []
        missing: list[str] = []
        for t in self.observer.gpus(probe_command(window_s), window_s):
            errors: list[str] = []
            if t.failed:
                missing.append(t.failed)
                continue
            if t.form == "dcgm":
                got = parse_dcgm(parse(t.text, time.monotonic()))
            else:
                got, errors = parse_probe(t.host, t.text)
                errors = [t.exited] if t.exited and not got else errors
            gpus += [replace(g, roles=roles.get((g.host, g.index), ())) for g in got]
            missing += [e if e.startswith(t.host) else f"{t.host}: {e}" for e in errors]
        # a host without GPUs answers at once: the window still lasts window_s
        time.sleep(max(0.0, window_s - (time.monotonic() - start)))
        return gpus, missing
