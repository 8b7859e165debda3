"""The counts commands print about a deployment: what `up` starts (`validate` says the same
number `up --dry-run` lists) and how many of the units `status` shows are healthy."""

from __future__ import annotations

import re
from collections import Counter
from typing import TYPE_CHECKING, Any

from pdctl.spec.value import url_host

if TYPE_CHECKING:
    from pdctl.plan.model import Plan
    from pdctl.render.bundle import Bundle

# How roles are listed: in start order (stores, engines, the router).
ROLE_ORDER = ("mooncake_master", "prefill", "decode", "serve", "router")


def planned(plan: Plan, bundle: Bundle | None = None) -> tuple[str, list[str]]:
    """What `up` starts, in start order, and the word for it: on hosts the plan's units
    (processes and containers, the router and a Mooncake master included), on Kubernetes the
    bundle's objects (`Kind/name`: give the bundle)."""
    if plan.on_kubernetes:
        assert bundle is not None, "the objects are the bundle's"
        return "object", [f"{o['kind']}/{o['metadata']['name']}" for o in bundle.objects]
    return "unit", [u.name for u in plan.units]


def counted(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def up(row: dict[str, Any]) -> bool:
    """Healthy, or running where there is no health check (a Mooncake master)."""
    return row["health"] == "healthy" or (
        row["health"] == "-" and str(row["state"]).startswith("running"))


# A Kubernetes workload's rollout row: `ready/desired ready`, or `... groups ready` (an LWS).
ROLLOUT_STATE = re.compile(r"(\d+)/(\d+)( groups)? ready")


def missing(rollout: dict[str, Any], instances: list[dict[str, Any]]) -> int:
    """How many of the replicas (LeaderWorkerSet: groups) a Kubernetes workload wants have no
    pod at all (a quota or an admission webhook stopped its ReplicaSet): each is a unit that
    is not up. Its pods are named `<workload>-...`; an LWS group's leader `<workload>-<n>`."""
    found = ROLLOUT_STATE.fullmatch(str(rollout["state"]))
    if found is None:
        return 0
    want, groups = int(found.group(2)), bool(found.group(3))
    head = f"{rollout['unit']}-"
    mine = [str(r["unit"])[len(head) :] for r in instances if str(r["unit"]).startswith(head)]
    have = sum(1 for rest in mine if rest.isdigit()) if groups else len(mine)
    return max(0, want - have)


ENGINES = ("prefill", "decode", "serve")


def degrade(
    rows: list[dict[str, Any]], views: dict[str, dict[str, tuple[int, int]]] | None = None
) -> list[dict[str, Any]]:
    """A router that answers its own /liveness is not up while it has no healthy worker of
    a role it routes to: every request then gets 503 ("No available workers: 1 prefill, 0
    decode", vllm-router 0.1.17). Its row becomes `degraded`, with why: from the router's
    own view (`views`: router unit -> role -> (healthy, total), its GET /readiness) and from
    the engines' rows behind it (a role none of whose rows is up)."""
    instances = [r for r in rows if r.get("kind", "instance") == "instance"]
    behind: dict[str, list[dict[str, Any]]] = {}
    for r in instances:
        if r["role"] in ENGINES:
            behind.setdefault(str(r["role"]), []).append(r)
    out = []
    for r in rows:
        if r.get("role") != "router" or not up(r):
            out.append(r)
            continue
        why = []
        for role, (healthy, total) in sorted((views or {}).get(str(r["unit"]), {}).items()):
            if total and not healthy:
                why.append(f"the router sees 0 of {total} {role} healthy (its /readiness)")
        for role, engines in sorted(behind.items()):
            if not any(up(e) for e in engines):
                states = ", ".join(
                    f"{e['unit']}: {e['health'] if e['health'] != '-' else e['state']}"
                    for e in engines)
                why.append(f"no {role} up ({states})")
        if why:
            r = {**r, "health": "degraded", "why": "; ".join(why) + ": requests get 503"}
        out.append(r)
    return out


def status_counts(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Every instance counts, the router's and the master's too: units, how many are up, per
    role. A Kubernetes workload's rollout row summarises its pods and is not counted again,
    but each replica it wants that has no pod counts as a unit not up."""
    instances = [r for r in rows if r.get("kind", "instance") == "instance"]
    absent = [{"role": r["role"], "health": "no pod", "state": "-"}
              for r in rows
              if r.get("kind") == "rollout"
              for _ in range(missing(r, instances))]
    rows = instances + absent
    roles = Counter(str(r["role"]) for r in rows)
    ups = Counter(str(r["role"]) for r in rows if up(r))
    ordered = sorted(roles, key=lambda r: (ROLE_ORDER.index(r) if r in ROLE_ORDER else 9, r))
    return {"units": len(rows), "up": sum(1 for r in rows if up(r)),
            "roles": {r: roles[r] for r in ordered}, "upByRole": {r: ups[r] for r in ordered},
            "degraded": [str(r["unit"]) for r in rows if r.get("health") == "degraded"]}


def status_line(rows: list[dict[str, Any]]) -> str:
    """`3 of 5 units up (prefill 2/2, decode 1/2, router 0/1 degraded)`: per role what is up
    of what the spec has; up is healthy, or running where there is no health check."""
    counts = status_counts(rows)
    degraded = Counter(str(r["role"]) for r in rows if r.get("health") == "degraded")
    roles = ", ".join(
        f"{role} {counts['upByRole'][role]}/{n}" + (" degraded" if degraded[role] else "")
        for role, n in counts["roles"].items())
    line = f"{counts['up']} of {counted(counts['units'], 'unit')} up"
    return line + (f" ({roles})" if roles else "")


def endpoints_hint(plan: Plan) -> str | None:
    """Phase 0 on hosts with several replicas and no `router`: the clients get one endpoint per
    replica and choose among them themselves; a warning line (validate, up) that lists them and
    says how to get one address (docs/phase0-hosts.md, "One endpoint"). None otherwise."""
    if plan.phase != 0 or plan.on_kubernetes or any(s.role == "router" for s in plan.services):
        return None
    urls = [f"http://{url_host(u.host.address)}:{u.port}/v1"
            for u in plan.units
            if u.role == "serve" and not u.leader and u.port]
    if len(urls) < 2:
        return None
    return (f"serve: clients get {len(urls)} endpoints, one per replica, and must spread requests "
            f"over them themselves: {', '.join(urls)}; for one address add `router: {{}}` "
            "(vllm-router in front of the replicas, docs/phase0-hosts.md)")
