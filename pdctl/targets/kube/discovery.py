"""API discovery for the Kubernetes target: which kinds the cluster serves, at which REST path,
namespaced or not, with which verbs. Read from the API server itself (`/apis` and
`/api/v1`, `/apis/<group>/<version>`), each group version at most once per run, so every kind
render emits (RBAC, NetworkPolicy, Gateway API and other custom resources) is applied the same
way, and a kind the cluster lacks is known before anything is applied."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pdctl.errors import PdctlError

# API groups that Kubernetes serves itself; a kind of any other group comes from a CRD.
# fmt: off
BUILTIN_GROUPS = frozenset({
    "", "apps", "batch", "policy", "autoscaling", "networking.k8s.io",
    "rbac.authorization.k8s.io", "storage.k8s.io", "scheduling.k8s.io", "coordination.k8s.io",
    "admissionregistration.k8s.io", "apiextensions.k8s.io", "certificates.k8s.io",
    "discovery.k8s.io", "node.k8s.io", "events.k8s.io", "apiregistration.k8s.io",
    "authentication.k8s.io", "authorization.k8s.io", "flowcontrol.apiserver.k8s.io",
    "resource.k8s.io", "storagemigration.k8s.io", "internal.apiserver.k8s.io",
})
# fmt: on
# What to install when a group's CRDs are missing (the CRD name is added: <plural>.<group>).
INSTALL = {
    "inference.networking.k8s.io": "the Gateway API Inference Extension CRDs",
    "gateway.networking.k8s.io": "the Gateway API CRDs",
    "leaderworkerset.x-k8s.io": "LeaderWorkerSet",
}


class ApiError(PdctlError):
    """A Kubernetes API call answered with an error status (404 is not an error here)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Resource:
    """One REST resource of the cluster, as discovery lists it."""

    group: str
    version: str
    kind: str
    plural: str
    namespaced: bool
    verbs: frozenset[str]

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        out = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced:
            out += f"/namespaces/{namespace}"
        out += f"/{self.plural}"
        return out + (f"/{name}" if name else "")


def split(api_version: str) -> tuple[str, str]:
    """'apps/v1' -> ('apps', 'v1'); 'v1' -> ('', 'v1')."""
    group, _, version = api_version.rpartition("/")
    return group, version


def guess_plural(kind: str) -> str:
    """The resource name a CRD for `kind` usually has (only for messages)."""
    low = kind.lower()
    if low.endswith(("s", "x", "ch", "sh")):
        return low + "es"
    if low.endswith("y") and low[-2:-1] not in "aeiou":
        return low[:-1] + "ies"
    return low + "s"


class Discovery:
    """What the cluster serves, fetched lazily and kept for the run. `get(path)` returns the
    decoded JSON, None on 404, and raises ApiError on other failures."""

    def __init__(self, get: Callable[[str], Any]) -> None:
        self._get = get
        self._versions: dict[str, dict[str, Resource] | None] = {}
        self._preferred: list[str] | None = None
        self._groups: dict[str, list[str]] = {}

    def served(self, api_version: str) -> dict[str, Resource] | None:
        """kind -> Resource of one group version; None when the cluster does not serve it."""
        if api_version not in self._versions:
            group, version = split(api_version)
            prefix = "/apis/" if group else "/api/"
            data = self._get(prefix + api_version)
            self._versions[api_version] = None if data is None else _parse(data, group, version)
        return self._versions[api_version]

    def find(self, api_version: str, kind: str) -> Resource | None:
        return (self.served(api_version) or {}).get(kind)

    def preferred(self) -> list[str]:
        """'v1' and the preferred version of every group in /apis, in the server's order."""
        if self._preferred is None:
            groups = (self._get("/apis") or {}).get("groups") or []
            self._preferred = ["v1"]
            for g in groups:
                versions = [v["groupVersion"] for v in g.get("versions") or []]
                self._groups[g["name"]] = versions
                pref = (g.get("preferredVersion") or {}).get("groupVersion")
                if pref or versions:
                    self._preferred.append(pref or versions[0])
        return self._preferred

    def everything(self) -> list[Resource]:
        """Every resource of every group's preferred version. A group version that fails
        (an aggregated API whose backend is down answers 503) is left out, as kubectl does."""
        out: list[Resource] = []
        for api_version in self.preferred():
            try:
                out.extend((self.served(api_version) or {}).values())
            except ApiError:
                self._versions[api_version] = None
        return out

    def by_kind(self, kind: str) -> Resource | None:
        """The resource of `kind` in the first group that serves it (the core group first)."""
        return next((r for r in self.everything() if r.kind == kind), None)

    def missing(self, objs: list[dict[str, Any]]) -> str | None:
        """One line naming every kind in `objs` the cluster does not serve, and what to
        install; None when it serves them all."""
        lacking: list[tuple[str, str]] = []
        for obj in objs:
            key = (obj["apiVersion"], obj["kind"])
            if key not in lacking and self.find(*key) is None:
                lacking.append(key)
        if not lacking:
            return None
        clauses, installs, builtin = [], [], False
        for api_version, kind in lacking:
            group, version = split(api_version)
            elsewhere = self._other_versions(group, version, kind)
            clause = f"{kind} ({api_version}"
            if elsewhere:
                clause += f", only {', '.join(elsewhere)} is served"
            clauses.append(clause + ")")
            if group in BUILTIN_GROUPS:
                builtin = True
                continue
            plural = next(
                (r.plural for r in self._all_versions(group) if r.kind == kind), guess_plural(kind)
            )
            fix = f"{INSTALL.get(group, 'the CRD')} ({plural}.{group})"
            if fix not in installs:
                installs.append(fix)
        fixes = [f"install {' and '.join(installs)} first"] if installs else []
        if builtin:
            fixes.append("use a Kubernetes release that serves it")
        return f"the cluster does not serve {' or '.join(clauses)}: {'; '.join(fixes)}"

    def _all_versions(self, group: str) -> list[Resource]:
        if not group:
            return []
        self.preferred()
        out: list[Resource] = []
        for api_version in self._groups.get(group, []):
            try:
                out.extend((self.served(api_version) or {}).values())
            except ApiError:
                continue
        return out

    def _other_versions(self, group: str, version: str, kind: str) -> list[str]:
        return [
            r.api_version
            for r in self._all_versions(group)
            if r.kind == kind and r.version != version
        ]


def _parse(data: dict[str, Any], group: str, version: str) -> dict[str, Resource]:
    """An APIResourceList -> kind -> Resource (subresources such as pods/log left out)."""
    out: dict[str, Resource] = {}
    for res in data.get("resources") or []:
        name = res.get("name") or ""
        if not name or "/" in name or not res.get("kind"):
            continue
        out.setdefault(
            res["kind"],
            Resource(
                group=group, version=version, kind=res["kind"], plural=name,
                namespaced=bool(res.get("namespaced")), verbs=frozenset(res.get("verbs") or ()),
            ),
        )
    return out
