"""`up` on Kubernetes: what would change, refusing objects pdctl did not make, apply, prune.

- An object the bundle renders whose name is taken by a live object that is not this
  deployment's (pdctl's labels, this instance, pdctl's hash annotation, and on a
  cluster-scoped object this namespace: `KubeApi.owns`) stops `up` before anything is
  applied: applying would take it over (server-side apply with force) and `down` would then
  delete it.
- An object is `unchanged` only when the live object still holds every field pdctl sends
  (with the hash annotation of this bundle's version): an edit outside pdctl (`kubectl
  scale`) is an `update`, as `pdctl diff` shows it. Unchanged objects are not written.
- Prune (objects this deployment applied that the bundle no longer has) runs after the
  rollout succeeded; a failed rollout keeps them (the previous version keeps serving).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pdctl.errors import PdctlError
from pdctl.render.bundle import apply_rank as rank
from pdctl.targets.kube.discovery import ApiError, Resource, split
from pdctl.targets.kube.errors import naming_applied
from pdctl.targets.kube.wait import wait

if TYPE_CHECKING:
    from pdctl.targets.kube.api import KubeApi

WORKLOADS = ("Deployment", "LeaderWorkerSet", "StatefulSet")  # what serves
FIELD_MANAGER = "pdctl"
INSTANCE = "app.kubernetes.io/instance"
MANAGED_BY = "app.kubernetes.io/managed-by"
# Kinds never pruned or deleted: applying over an existing one takes nothing over that `down`
# could delete.
NEVER_DELETED = (("", "Namespace"), ("apiextensions.k8s.io", "CustomResourceDefinition"))
SHARED_KINDS = tuple(kind for _, kind in NEVER_DELETED)
# A kind not in the bundle whose listing answers one of these is not one pdctl could use.
NOT_LISTABLE = (403, 404, 405)
Live = tuple[dict[str, Any], Resource, "dict[str, Any] | None"]


def not_created(kind: str, name: str, namespaced: bool, namespace: str) -> str:
    why = "the server answered 404 to apply and to create"
    if not namespaced:
        return f"{kind}/{name}: {why}"
    return (
        f"{kind}/{name}: namespace {namespace} does not exist ({why}); create it, or set "
        "kubernetes.createNamespace: true"
    )


def live_objects(tgt: KubeApi, objs: list[dict[str, Any]]) -> list[Live]:
    """Each object of the bundle (apply order) with its resource and its live version."""
    tgt.require_served(objs)
    out: list[Live] = []
    for obj in sorted(objs, key=lambda o: rank(o["kind"])):
        kind, meta = obj["kind"], obj["metadata"]
        res = tgt.resource(kind, obj["apiVersion"])
        out.append(
            (obj, res, tgt.get(kind, meta["name"], meta.get("namespace"), obj["apiVersion"]))
        )
    return out


def owner_of(tgt: KubeApi, live: dict[str, Any]) -> str:
    """Who seems to own a live object that is not this deployment's, in a few words."""
    meta = live.get("metadata") or {}
    labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
    refs = [f"{r.get('kind')}/{r.get('name')}" for r in meta.get("ownerReferences") or []]
    if refs:
        return f"owned by {', '.join(refs)}"
    if labels.get(MANAGED_BY) == "pdctl" and labels.get(INSTANCE):
        where = notes.get("pdctl.io/namespace")
        if labels[INSTANCE] != tgt.name:
            return f"pdctl deployment {labels[INSTANCE]!r}"
        if where and where != tgt.namespace:
            return f"pdctl deployment {labels[INSTANCE]!r} of namespace {where!r}"
    if labels.get(MANAGED_BY):
        return f"managed by {labels[MANAGED_BY]}"
    managers = sorted({f.get("manager", "?") for f in meta.get("managedFields") or []})
    if managers:
        return f"written by {', '.join(managers)}"
    if labels:
        shown = ",".join(f"{k}={v}" for k, v in sorted(labels.items())[:3])
        return f"labels {shown}{',...' if len(labels) > 3 else ''}"
    return "no labels; not applied by pdctl"


def refuse_foreign(tgt: KubeApi, found: list[Live]) -> None:
    """One line naming every live object the bundle would take over (nothing applied yet)."""
    taken = [
        f"{obj['kind']}/{obj['metadata']['name']} ({owner_of(tgt, live)})"
        for obj, res, live in found
        if live is not None
        and obj["kind"] not in SHARED_KINDS
        and not tgt.owns(live, res.namespaced)
    ]
    if taken:
        one = len(taken) == 1
        raise PdctlError(
            f"{', '.join(taken)} already exist{'s' if one else ''} and "
            f"{'was' if one else 'were'} not applied by pdctl for deployment {tgt.name!r} in "
            f"namespace {tgt.namespace}: nothing applied; rename the deployment (`name:` in the "
            f"spec), or delete or relabel {'it' if one else 'them'}"
        )


QUANTITY = re.compile(r"([0-9.]+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
SCALE = {"m": 1e-3, "": 1, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
SCALE.update({"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60})


def same_scalar(want: Any, have: Any) -> bool:
    """Equal, or equal as the API server stores it (a quantity `1` is stored `"1"`,
    `0.5` as `500m`)."""
    if want == have:
        return True
    if isinstance(want, bool) or isinstance(have, bool) or want is None or have is None:
        return False
    a, b = QUANTITY.fullmatch(str(want)), QUANTITY.fullmatch(str(have))
    if not (a and b):
        return False
    try:
        return float(a[1]) * SCALE[a[2] or ""] == float(b[1]) * SCALE[b[2] or ""]
    except ValueError:
        return False


def holds(have: Any, want: Any) -> bool:
    """Whether the live value `have` still holds every field of `want` (what pdctl sends):
    fields the server or others added are not pdctl's; a list's items are matched by name
    where they have one, else in order."""
    if isinstance(want, dict):
        return isinstance(have, dict) and all(held(have, k, v) for k, v in want.items())
    if isinstance(want, list):
        if not isinstance(have, list) or len(have) < len(want):
            return False
        named = all(isinstance(w, dict) and "name" in w for w in want)
        if named:
            by_name = {h.get("name"): h for h in have if isinstance(h, dict)}
            return all(holds(by_name.get(w["name"]), w) for w in want)
        return len(have) == len(want) and all(holds(h, w) for h, w in zip(have, want, strict=True))
    return same_scalar(want, have)


def held(have: dict[str, Any], key: str, want: Any) -> bool:
    """A field of a live object holds `want`; a missing one holds an empty value (the API
    server omits empty fields: `readOnly: false`, `[]`)."""
    if key not in have:
        return want in (None, False, 0, "", [], {})
    return holds(have[key], want)


def action_of(tgt: KubeApi, obj: dict[str, Any], res: Resource, live: Any) -> str:
    """create, update or unchanged: unchanged when the live object holds what pdctl would
    send (its hash annotation included: a changed spec is an update even where a field
    was removed)."""
    if live is None:
        return "create"
    return "unchanged" if holds(live, tgt.body(obj, res)) else "update"


def stale(tgt: KubeApi, objs: list[dict[str, Any]]) -> list[tuple[Resource, str]]:
    """What prune deletes: objects this deployment applied that `objs` no longer has."""
    wanted = {tgt._key(o) for o in objs}
    return [(r, n) for r, n in owned_objects(tgt, objs) if (r.group, r.kind, n) not in wanted]


def object_changes(tgt: KubeApi, objs: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """(action, kind, name): create, update, unchanged, or prune; refuses (one line) when a
    rendered name is taken by an object this deployment did not apply."""
    found = live_objects(tgt, objs)
    refuse_foreign(tgt, found)
    out = [(action_of(tgt, o, r, live), o["kind"], o["metadata"]["name"]) for o, r, live in found]
    return out + [("prune", res.kind, name) for res, name in stale(tgt, objs)]


def apply_objects(
    tgt: KubeApi, objs: list[dict[str, Any]], only_changed: bool = False
) -> list[tuple[str, str]]:
    """Server-side apply (field manager pdctl, force) in apply order; `only_changed`: skip
    what is unchanged. Nothing is applied unless every kind is served and no rendered name
    is taken by an object this deployment did not apply. Answers (kind, name) applied."""
    found = live_objects(tgt, objs)
    refuse_foreign(tgt, found)
    done: list[tuple[str, str]] = []
    for obj, res, live in found:
        if only_changed and action_of(tgt, obj, res, live) == "unchanged":
            continue
        kind, meta = obj["kind"], obj["metadata"]
        body = tgt.body(obj, res)
        namespace = meta.get("namespace") or tgt.namespace
        query = [("fieldManager", FIELD_MANAGER), ("force", "true")]
        path = res.path(namespace, meta["name"])
        with naming_applied(done):  # a refusal names what this run applied before it
            if tgt._call("PATCH", path, body, query, "application/apply-patch+yaml") is None:
                # A real API server creates on apply; servers without apply-create get a POST.
                query = [("fieldManager", FIELD_MANAGER)]
                if tgt._call("POST", res.path(namespace), body, query) is None:
                    raise PdctlError(not_created(kind, meta["name"], res.namespaced, namespace))
        tgt.say(f"applied {kind}/{meta['name']}")
        done.append((kind, meta["name"]))
    return done


def prune(tgt: KubeApi, objs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Delete, in reverse apply order, what this deployment applied that `objs` lacks."""
    gone = []
    for res, name in reversed(stale(tgt, objs)):
        tgt._call("DELETE", res.path(tgt.namespace, name))
        tgt.say(f"pruned {res.kind}/{name}")
        gone.append((res.kind, name))
    return gone


def roll_out(tgt: KubeApi, objs: list[dict[str, Any]], timeout: float) -> None:
    """Apply what changed, wait for the rollout, then prune. When the wait fails, what prune
    would delete is kept (the previous version may still be what serves) and the error line
    says so."""
    apply_objects(tgt, objs, only_changed=True)
    try:
        wait(tgt, objs, timeout)
    except PdctlError as exc:
        kept = [f"{res.kind}/{name}" for res, name in stale(tgt, objs)]
        if not kept:
            raise
        # The workloads first (what may still serve); the rest counted, to keep one line short.
        shown = [k for k in kept if k.split("/")[0] in WORKLOADS] or kept[:3]
        more = f" and {len(kept) - len(shown)} more objects" if len(kept) > len(shown) else ""
        raise PdctlError(
            f"{exc}; kept the previous version's {', '.join(shown)}{more} (pruned only after a "
            "successful rollout): `pdctl up` prunes them once it rolls out, `pdctl down` "
            "deletes all"
        ) from None
    prune(tgt, objs)


def candidates(tgt: KubeApi, objs: list[dict[str, Any]]) -> list[Resource]:
    """Every kind pdctl could have created: the bundle's kinds, then every discovered kind
    that can be listed, created and deleted; one version per (group, kind)."""

    found: dict[tuple[str, str], Resource] = {}
    for obj in objs:
        res = tgt.discovery.find(obj["apiVersion"], obj["kind"])
        if res is not None:
            found.setdefault((res.group, res.kind), res)
    for res in tgt.discovery.everything():
        if {"list", "create", "delete"} <= res.verbs:
            found.setdefault((res.group, res.kind), res)
    kept = (r for k, r in found.items() if k not in NEVER_DELETED)
    return sorted(kept, key=lambda r: (rank(r.kind), r.group, r.kind))


def owned_objects(tgt: KubeApi, objs: list[dict[str, Any]]) -> list[tuple[Resource, str]]:
    """(resource, name) of every object this deployment applied, in apply order."""

    bundle_kinds = {split(o["apiVersion"])[0] + "/" + o["kind"] for o in objs}
    out: list[tuple[Resource, str]] = []
    for res in candidates(tgt, objs):
        try:
            items = tgt._list(res)
        except ApiError as exc:
            if exc.status in NOT_LISTABLE and f"{res.group}/{res.kind}" not in bundle_kinds:
                continue  # not allowed to list it here: not allowed to have created it
            raise
        out.extend((res, o["metadata"]["name"]) for o in items)
    return out
