"""`pdctl scale SPEC ROLE=N` on hosts (docs/autoscaling.md, "Scaling on hosts by hand").

The plan decides: `load({role: n})` plans and renders the spec with the roles' replicas set
to those counts (the placement, ports and GPUs `pdctl plan` would choose for them; a role not
named keeps the spec's). What runs is brought to that plan through `actions.up` (its start
path, health wait and stop path). The router: in plain mode (phase 0) it keeps the unit the
spec deployed, and its members change through vllm-router's worker API (POST /workers,
DELETE /workers/<url>), so that no request in flight through it is cut; in P/D mode
vllm-router 0.1.17 takes no new worker at run time, so its unit is the scaled plan's (its
command line names the members) and `up` restarts it after the new engines are healthy (a
scale-down first takes the engines out with DELETE, as in plain mode). Scaling up starts the
new instances, waits until they are healthy, then adds them to the router; scaling down
removes them from the router first, waits until each has no request running or waiting
(`vllm:num_requests_running` and `vllm:num_requests_waiting` at 0 on two reads in a row, or
the drain timeout), then stops it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import quote

from pdctl import actions
from pdctl.errors import PdctlError, UsageError
from pdctl.plan.model import Plan
from pdctl.plan.router import engine_url
from pdctl.render.bundle import Bundle
from pdctl.targets import open_target
from pdctl.targets.base import Connect, Endpoint, Observer
from pdctl.targets.state import Change

ROLES = {0: ("serve",), 2: ("prefill", "decode"), 3: ("prefill", "decode")}
Load = Callable[[dict[str, int]], tuple[Plan, Bundle]]  # role -> count; others: the spec's
IN_FLIGHT = re.compile(r"^vllm:num_requests_(?:running|waiting)(?:\{[^}]*\})?\s+(\S+)$", re.M)


def parse_request(text: str) -> tuple[str, int]:
    """`ROLE=N` -> (role, n); UsageError on anything else."""
    role, sep, count = text.partition("=")
    if not sep or not role or not count.strip().lstrip("-").isdigit():
        raise UsageError(f"{text!r} is not ROLE=N", fix="e.g. `pdctl scale spec.yaml serve=2`")
    return role.strip(), int(count)


def check_request(plan: Plan, kind: str, role: str, n: int) -> None:
    """What `scale` cannot do, refused before anything connects (UsageError, exit 2)."""
    if plan.on_kubernetes:
        raise UsageError(
            "pdctl scale works on SSH hosts; on Kubernetes the rendered HorizontalPodAutoscaler "
            "or KEDA ScaledObject scales each role",
            fix="add `autoscaling:` to the spec (docs/autoscaling.md), or `kubectl scale`",
        )
    if kind != "hosts":
        raise UsageError(
            f"pdctl scale works on SSH hosts, not {kind}", fix="leave out --docker-url"
        )
    roles = ROLES.get(plan.phase, ())
    if role not in roles:
        raise UsageError(
            f"phase {plan.phase} runs no role {role!r}", fix=f"scale {' or '.join(roles)}"
        )
    if n < 1:
        raise UsageError(f"{role}={n}: a role needs at least 1 instance", fix=f"{role}=1 or more")
    if plan.shape is not None and plan.shape.dis.connector == "p2p-nccl":
        raise UsageError(
            "p2p-nccl engines register with the router over ZMQ: pdctl scale cannot take one "
            "out of the router first", fix="change the spec's replicas and run `pdctl up`",
        )


@dataclass(frozen=True)
class Moves:
    """What scaling does on the hosts: the units of the role to start and to stop."""

    start: tuple[str, ...] = ()
    stop: tuple[str, ...] = ()
    restart: tuple[str, ...] = ()  # the P/D router, given its new members


def of_role(unit: str, role: str) -> bool:
    """Whether `unit` (<name>-<role>-<i>) is an instance of `role`."""
    return unit.rsplit("-", 1)[0].endswith(f"-{role}")


def moves(changes: list[Change], role_units: set[str], role: str, router: str = "") -> Moves:
    """The starts and stops of `changes` (the scaled bundle against what runs), and the
    restart of `router` (the P/D router's unit). Anything else to change (a unit of another
    role that is not running or differs from the spec, a unit of the role that would restart)
    is refused: `scale` changes a count, `up` the rest."""
    start, stop, restart, other = [], [], [], []
    for c in changes:
        if c.action == "keep":
            continue
        if c.action == "start" and c.unit in role_units and c.why == "new":
            start.append(c.unit)
        elif c.action == "stop" and of_role(c.unit, role):
            stop.append(c.unit)
        elif c.action == "restart" and c.unit == router and c.why == "spec changed":
            restart.append(c.unit)
        else:
            other.append(f"{c.unit} on {c.host} ({c.action}: {c.why})")
    if other:
        raise PdctlError(
            "what runs differs from the spec beyond the count of " + role + ": "
            + "; ".join(other) + "; run `pdctl up` first (pdctl scale changes a count only)"
        )
    return Moves(tuple(start), tuple(stop), tuple(restart))


def mixed(deployed: Bundle, scaled: Bundle, role: str, pd: bool = False) -> Bundle:
    """Plain mode: the scaled bundle's units of `role`, the spec's units of every other role
    (the router keeps the unit that runs: its members change through its worker API). P/D
    mode: the scaled bundle (its router's command line names the new members)."""
    if pd:
        return scaled
    keep = [u for u in deployed.units if u.unit.role != role]
    return replace(scaled, units=(*keep, *(u for u in scaled.units if u.unit.role == role)))


def worker_urls(text: str) -> set[str]:
    """The worker URLs in vllm-router's GET /workers answer (every `url` it names)."""
    found: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "url" and isinstance(value, str):
                    found.add(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(json.loads(text))
    return found


def in_flight(metrics: str) -> float:
    """Requests an engine runs or queues, from its /metrics text."""
    return sum(float(v) for v in IN_FLIGHT.findall(metrics))


@dataclass
class Scaled:
    """What `scale` did (or, with dry_run, would do)."""

    role: str
    count: int
    moves: Moves = field(default_factory=Moves)
    added: list[str] = field(default_factory=list)  # engine URLs the router was given
    removed: list[str] = field(default_factory=list)  # engine URLs taken out of the router
    drained: dict[str, str] = field(default_factory=dict)  # unit -> how its drain ended
    applied: bool = False


class Guarded:
    """The CLI's Progress for the apply: refuses (before anything is applied) changes beyond
    the moves read at first, and confirms without asking; the rest is the CLI's."""

    def __init__(self, inner: actions.Progress, expected: Moves, role_units: set[str], role: str,
                 router: str = ""):
        self.inner, self.expected, self.role_units, self.role = inner, expected, role_units, role
        self.router = router

    def __getattr__(self, name: str) -> Any:  # say, applying, stage
        return getattr(self.inner, name)

    def planned(self, kind: str, changes: list[Change], compared: bool) -> None:
        if moves(changes, self.role_units, self.role, self.router) != self.expected:
            raise PdctlError("what runs changed while pdctl scale ran; run it again")
        # shown once already, when scale read what runs

    def confirm(self) -> bool:
        return True


def scale(
    load: Load, deployed: Bundle, role: str, n: int, options: Connect,
    progress: actions.Progress, secrets: Callable[[], dict[str, str]], dry_run: bool = False,
    timeout: float = 900.0, drain_timeout: float = 120.0, poll: float = 1.0,
    others: dict[str, int] | None = None,
    prepare: Callable[[Plan, set[str]], None] | None = None,
) -> Scaled:
    """Bring ROLE to `n` instances, the other roles at `others` (absent: the spec's counts);
    see the module docstring. `prepare` gets the scaled plan and the hosts where instances
    start, before they start (the bundle's files copied there: `--bundle`)."""
    counts = {**(others or {}), role: n}
    plan, scaled = load(counts)
    pd = plan.shape is not None
    bundle = mixed(deployed, scaled, role, pd)
    role_units = {u.unit.name for u in scaled.units if u.unit.role == role}
    router = next((s for s in plan.services if s.role == "router"), None)
    restarting = router.name if router is not None and pd else ""
    with open_target(plan, bundle, options, progress.say) as target:
        changes = target.changes(grace=timeout)
    out = Scaled(role, n, moves(changes, role_units, role, restarting))
    progress.planned("hosts", changes, compared=True)
    if dry_run:
        return out
    if out.moves.stop:  # where the instances to stop run: the plan of the count that runs
        was, was_bundle = load({**counts, role: n + len(out.moves.stop)})
        gone = {i.name: i for i in was.instances if i.name in out.moves.stop}
        with open_target(was, mixed(deployed, was_bundle, role, pd), options) as target:
            obs = target.observe()
            if router is not None:
                out.removed = _members(obs, router_at(plan), remove=[
                    engine_url(i) for i in gone.values()
                ])
            for unit in was.units:
                if unit.name in gone:
                    end = Endpoint(unit.name, role, unit.host.name, unit.port or 0, unit.address)
                    out.drained[unit.name] = _drain(obs, end, drain_timeout, poll, progress.say)
    if prepare is not None and out.moves.start:
        prepare(plan, {u.host.name for u in plan.units if u.name in out.moves.start})
    guard = Guarded(progress, out.moves, role_units, role, restarting)
    actions.up(plan, bundle, options, guard, secrets, "none", True, timeout)
    started = [engine_url(i) for i in plan.instances if i.name in out.moves.start]
    if router is not None and not pd:  # plain mode takes new workers
        with open_target(plan, bundle, options) as target:
            want = [engine_url(i) for i in plan.instances if i.host is not None]
            out.added = _members(target.observe(), router_at(plan), add=want)
    elif out.moves.restart:  # P/D: the router restarted with the new members
        out.added = started
    out.applied = True
    return out


def router_at(plan: Plan) -> Endpoint:
    router = next(s for s in plan.services if s.role == "router")
    return Endpoint(router.name, "router", router.host.name, router.port, router.local)


def _members(
    obs: Observer, router: Endpoint, add: list[str] | None = None, remove: list[str] | None = None
) -> list[str]:
    """Add the URLs of `add` the router lacks, or take out those of `remove` it has; the URLs
    changed. PdctlError when the router does not answer or refuses."""
    listed = obs.request(router, "/workers")
    if listed.status != 200:
        raise PdctlError(f"the router did not list its workers: {listed.text[:200]}")
    now = worker_urls(listed.text)
    done = []
    for url in add or []:
        if url in now:
            continue
        reply = obs.request(
            router, "/workers", "POST", json.dumps({"url": url}).encode(),
            {"Content-Type": "application/json"},
        )
        _ok(reply.status, reply.text, f"add {url} to the router")
        done.append(url)
    for url in remove or []:
        if url not in now:
            continue
        reply = obs.request(router, "/workers/" + quote(url, safe=""), "DELETE")
        _ok(reply.status, reply.text, f"take {url} out of the router")
        done.append(url)
    if remove:  # what the router still lists is not stopped (its requests would fail)
        left = worker_urls(obs.request(router, "/workers").text) & set(remove)
        if left:
            raise PdctlError(f"the router still lists {', '.join(sorted(left))}; nothing stopped")
    return done


def _ok(status: int, text: str, what: str) -> None:
    if not 200 <= status < 300:
        raise PdctlError(f"could not {what}: {status or 'no answer'} {text[:200]}")


def _drain(
    obs: Observer, engine: Endpoint, limit: float, poll: float, say: Callable[[str], None]
) -> str:
    """Wait until `engine` runs and queues no request on two reads in a row, or `limit`
    seconds; how it ended, in words."""
    say(f"draining {engine.name}: waiting for its requests in flight")
    start, zeros, count = time.monotonic(), 0, 0.0
    while True:
        reply = obs.request(engine, "/metrics")
        if reply.status != 200:
            return f"not answering ({reply.text[:80]}): nothing to drain"
        count = in_flight(reply.text)
        zeros = zeros + 1 if count == 0 else 0
        if zeros >= 2:
            return f"drained in {time.monotonic() - start:.0f} s"
        if time.monotonic() - start >= limit:
            return f"drain timed out after {limit:.0f} s with {count:.0f} in flight"
        time.sleep(poll)


def running_counts(load: Load, options: Connect, roles: list[str]) -> dict[str, int]:
    """How many instances of each role run (the spec's units found running or restarting,
    and units past the spec's count, which `up` would stop)."""
    plan, bundle = load({})
    with open_target(plan, bundle, options) as target:
        changes = target.changes()
    return {
        r: sum(1 for c in changes if of_role(c.unit, r) and c.action != "start") for r in roles
    }
