"""A server-side dry run of `up` on Kubernetes, and the diff `pdctl diff` prints from it.

Every object of the bundle is applied as `up` applies it (server-side apply, field manager
`pdctl`, force) with `dryRun=All`: the API server runs defaulting, validation and admission
and answers with the object it would store, storing nothing. That answer ("merged") is
compared with the live object, both without the fields the server owns (managedFields,
resourceVersion, generation, uid, creationTimestamp, status), as `kubectl diff` shows them.
Objects this deployment applied earlier that the bundle no longer has are what prune deletes.

Before the first dry-run request of an object pdctl checks that the server honours `dryRun`
at all: it sends a dry-run create of a ConfigMap and reads it back. A server that stored it
(the `kmock` emulator does: it ignores the query parameter) gets it deleted again and the run
refused (exit 2), so a dry run leaves no change on a cluster whose server ignores dry runs.

A Secret's values never appear in a diff (`masked`, as `kubectl diff` masks them).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import yaml

from pdctl.errors import PdctlError
from pdctl.render.bundle import apply_rank as rank
from pdctl.targets.kube.apply import owned_objects
from pdctl.targets.kube.discovery import ApiError

if TYPE_CHECKING:
    from pdctl.targets.kube.api import KubeApi

DRY_RUN = ("dryRun", "All")
SERVER_FIELDS = ("managedFields", "resourceVersion", "generation", "uid", "creationTimestamp")
PROBE = "pdctl-dry-run-probe"


class DryRunIgnored(PdctlError):
    """The server stores what a dry-run request sends: it cannot do what was asked (a
    server-side dry run), as a missing kind cannot; exit 2 for `diff` and `up --dry-run`."""

    exit_code = 2


@dataclass(frozen=True)
class ObjectDiff:
    """One object: `action` create | update | unchanged | prune, and the unified diff
    (empty when unchanged)."""

    action: str
    kind: str
    name: str
    text: str


def clean(obj: dict[str, Any] | None) -> dict[str, Any] | None:
    """`obj` without status and the metadata fields the server owns."""
    if obj is None:
        return None
    out = json.loads(json.dumps(obj))
    out.pop("status", None)
    meta = out.get("metadata") or {}
    for key in SERVER_FIELDS:
        meta.pop(key, None)
    if "annotations" in meta and not meta["annotations"]:
        del meta["annotations"]
    return out


def unified(live: dict[str, Any] | None, merged: dict[str, Any] | None, label: str) -> str:
    """The unified diff of two objects as YAML (`label`: group.version.Kind.namespace.name),
    a Secret's values masked."""

    live, merged = masked(live, merged)

    def lines(obj: dict[str, Any] | None) -> list[str]:
        if obj is None:
            return []
        return yaml.safe_dump(obj, sort_keys=True, default_flow_style=False).splitlines(True)

    out = difflib.unified_diff(lines(live), lines(merged), f"live/{label}", f"merged/{label}")
    return "".join(out)


MASKED = ("data", "stringData")  # a Secret's values: never printed


def masked(
    live: dict[str, Any] | None, merged: dict[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """A Secret's `data` and `stringData` values replaced as `kubectl diff` does: `***` where
    both sides hold the same value (or only one side has the key), `*** (before)` and
    `*** (after)` where it changed; keys kept. Other kinds are returned as they are."""
    if not any(o is not None and o.get("kind") == "Secret" for o in (live, merged)):
        return live, merged
    before = json.loads(json.dumps(live)) if live is not None else None
    after = json.loads(json.dumps(merged)) if merged is not None else None
    for field in MASKED:
        old = (before or {}).get(field)
        new = (after or {}).get(field)
        old = old if isinstance(old, dict) else {}
        new = new if isinstance(new, dict) else {}
        for key in old.keys() | new.keys():
            changed = key in old and key in new and old[key] != new[key]
            if key in old:
                old[key] = "*** (before)" if changed else "***"
            if key in new:
                new[key] = "*** (after)" if changed else "***"
        for side, values in ((before, old), (after, new)):
            if side is not None and field in side:
                side[field] = values if isinstance(side[field], dict) else "***"
    return before, after


def label_of(api_version: str, kind: str, namespace: str, name: str) -> str:
    return ".".join(p for p in (api_version.replace("/", "."), kind, namespace, name) if p)


def check_dry_run(tgt: KubeApi) -> None:
    """Refuse (one line) when the server stores what a dry-run request sends."""
    path = f"/api/v1/namespaces/{tgt.namespace}/configmaps"
    body = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": PROBE, "namespace": tgt.namespace},
        "data": {"purpose": "pdctl checks that this server honours dryRun; never stored"},
    }
    try:
        there = tgt._call("GET", f"{path}/{PROBE}") is not None
        if not there:
            tgt._call("POST", path, body, [DRY_RUN, ("fieldManager", "pdctl")])
    except ApiError:  # not allowed to read or create ConfigMaps here: nothing was stored
        return
    if there:
        raise DryRunIgnored(
            f"ConfigMap {tgt.namespace}/{PROBE} exists: a server that ignored dryRun stored it; "
            "delete it, and use a server that honours dryRun (or --dry-run --offline)"
        )
    if tgt._call("GET", f"{path}/{PROBE}") is None:
        return
    tgt._call("DELETE", f"{path}/{PROBE}")
    raise DryRunIgnored(
        "the Kubernetes API server ignores dryRun=All (a dry-run create was stored; pdctl "
        "deleted it again): a server-side dry run cannot be trusted there; use --dry-run "
        "--offline, or a conformant API server"
    )


def dry_run_apply(tgt: KubeApi, obj: dict[str, Any]) -> dict[str, Any]:
    """What the server would store for `obj` applied as `up` applies it (nothing stored)."""
    kind, meta = obj["kind"], obj["metadata"]
    res = tgt.resource(kind, obj["apiVersion"])
    body = tgt.body(obj, res)
    namespace = meta.get("namespace") or tgt.namespace
    query = [DRY_RUN, ("fieldManager", "pdctl"), ("force", "true")]
    path = res.path(namespace, meta["name"])
    done = tgt._call("PATCH", path, body, query, "application/apply-patch+yaml")
    if done is None:  # a server without apply-create (as `up` falls back to): a dry-run create
        done = tgt._call("POST", res.path(namespace), body, [DRY_RUN, ("fieldManager", "pdctl")])
    if done is None:  # the namespace does not exist (yet): the object as pdctl sends it
        done = body
    return done


def preview(tgt: KubeApi, objs: list[dict[str, Any]]) -> list[ObjectDiff]:
    """Each object's dry-run apply against its live version, in apply order, then what
    prune would delete. Nothing is stored."""
    tgt.require_served(objs)
    check_dry_run(tgt)
    out = []
    for obj in sorted(objs, key=lambda o: rank(o["kind"])):
        kind, meta = obj["kind"], obj["metadata"]
        namespace = meta.get("namespace") or tgt.namespace
        live = clean(tgt.get(kind, meta["name"], meta.get("namespace"), obj["apiVersion"]))
        merged = clean(dry_run_apply(tgt, obj))
        res = tgt.resource(kind, obj["apiVersion"])
        label = label_of(obj["apiVersion"], kind, namespace if res.namespaced else "", meta["name"])
        if live is None:
            action = "create"
        elif live == merged:
            action = "unchanged"
        else:
            action = "update"
        text = "" if action == "unchanged" else unified(live, merged, label)
        out.append(ObjectDiff(action, kind, meta["name"], text))
    wanted = {tgt._key(o) for o in objs}
    for res, name in owned_objects(tgt, objs):
        if (res.group, res.kind, name) in wanted:
            continue
        live = clean(tgt.get(res.kind, name, api_version=res.api_version))
        ns = tgt.namespace if res.namespaced else ""
        label = label_of(res.api_version, res.kind, ns, name)
        out.append(ObjectDiff("prune", res.kind, name, unified(live, None, label)))
    return out
