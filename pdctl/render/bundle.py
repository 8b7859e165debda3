"""A Bundle: what render produces, as data (the plan's units with their files, Kubernetes
objects as dicts in apply order) and as artifacts ({relative path: text}, in a stable order)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pdctl.plan.model import Unit

if TYPE_CHECKING:
    from pdctl.render.container import Container
    from pdctl.render.host_scripts import HostScripts

# Apply order by kind (after Helm's install order): the namespace, policies, accounts,
# configuration, storage and RBAC, Services, then workloads; a kind not named here (a custom
# resource such as InferencePool or HTTPRoute) comes last, in bundle order. Deletes go in reverse.
# fmt: off
APPLY_ORDER = (
    "Namespace", "NetworkPolicy", "ResourceQuota", "LimitRange", "PodDisruptionBudget",
    "ServiceAccount", "Secret", "ConfigMap", "StorageClass", "PersistentVolume",
    "PersistentVolumeClaim", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
    "Role", "RoleBinding", "Service", "DaemonSet", "Pod", "ReplicaSet", "Deployment",
    "HorizontalPodAutoscaler", "StatefulSet", "Job", "CronJob", "IngressClass", "Ingress",
)
# fmt: on


def apply_rank(kind: str) -> int:
    return APPLY_ORDER.index(kind) if kind in APPLY_ORDER else len(APPLY_ORDER)


def script_digest(text: str) -> str:
    """A start script's digest, what a host's observe script computes of the start.sh it
    finds (`sha256sum | cut -c1-16`): any rendered difference (args, env, setup) is a change."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Artifact:
    """One file of a bundle: its path and text. `make` instead of `text`: the text is made
    when first read (a Kubernetes object's YAML: `up` applies the objects as data and never
    needs it; `render` streams it)."""

    __slots__ = ("_make", "_text", "executable", "path")

    def __init__(
        self, path: str, text: str | None = None, executable: bool = False,
        make: Callable[[], str] | None = None,
    ) -> None:
        if (text is None) == (make is None):
            raise ValueError("an Artifact takes its text or a way to make it, one of them")
        self.path = path
        self.executable = executable
        self._text = text
        self._make = make

    @property
    def text(self) -> str:
        if self._text is None:
            assert self._make is not None
            self._text, self._make = self._make(), None
        return self._text

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Artifact):
            return NotImplemented
        return (self.path, self.text, self.executable) == (other.path, other.text, other.executable)

    def __hash__(self) -> int:
        return hash((self.path, self.executable))

    def __repr__(self) -> str:
        return f"Artifact({self.path!r}, executable={self.executable})"


@dataclass(frozen=True)
class UnitFiles:
    """One unit of a hosts bundle: the plan's unit, its rendered files (start.sh first), the
    unit hash written in its scripts (`pdctl-hash`) and the digest of its start script (what
    change detection compares with the host's copy). `container`: a container unit's
    definition (render/container.py), what start.sh and the docker SDK target both start."""

    unit: Unit
    files: tuple[Artifact, ...] = field(repr=False)
    hash: str
    digest: str
    container: Container | None = None

    @property
    def start(self) -> Artifact:
        return self.files[0]


@dataclass(frozen=True)
class Bundle:
    """What render produces. `kind` is "kubernetes" (YAML documents) or "hosts" (scripts).
    `units`: a hosts bundle's units in render order; `objects`: a
    Kubernetes bundle's objects as dicts in apply order (kind rank, then bundle order);
    `scripts`: a hosts bundle's scripts pdctl runs on the hosts (render/host_scripts.py)."""

    kind: str
    artifacts: tuple[Artifact, ...] = field(default=())
    units: tuple[UnitFiles, ...] = field(default=())
    objects: tuple[dict[str, Any], ...] = field(default=())
    scripts: HostScripts | None = None

    def __iter__(self) -> Iterator[Artifact]:
        return iter(self.artifacts)

    def __getitem__(self, path: str) -> str:
        for artifact in self.artifacts:
            if artifact.path == path:
                return artifact.text
        raise KeyError(path)

    def paths(self) -> list[str]:
        return [a.path for a in self.artifacts]

    def stream(self) -> str:
        """One text for stdout: a YAML stream `kubectl apply -f -` takes, or every file with a
        header line naming it."""
        if self.kind == "kubernetes":
            return "".join(a.text if a.text.startswith("---") else "---\n" + a.text for a in self)
        parts = []
        for artifact in self:
            parts.append(f"#### {artifact.path}\n{artifact.text}")
        return "\n".join(parts)


MANIFEST = ".pdctl-manifest"


def folder_manifest(bundle: Bundle, name: str, version: str) -> dict[str, Any]:
    """What `render --output-dir` writes as `.pdctl-manifest`: the deployment, the pdctl version
    and every file it wrote with its sha256 and mode."""
    files = {
        a.path: {
            "sha256": hashlib.sha256(a.text.encode()).hexdigest(),
            "mode": "0755" if a.executable else "0644",
        }
        for a in bundle
    }
    return {"pdctl": version, "deployment": name, "files": dict(sorted(files.items()))}


def parse_folder_manifest(text: str) -> tuple[str, dict[str, Any]]:
    """(deployment, files) of a `.pdctl-manifest`; ValueError for one that is damaged or names a
    path outside the folder."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not (isinstance(doc, dict) and isinstance(doc.get("deployment"), str)):
        raise ValueError("no deployment name")
    files = doc.get("files")
    if not isinstance(files, dict):
        raise ValueError("no files")
    for path in files:
        why = bad_path(path)
        if why is not None:
            raise ValueError(f"{path!r}: {why}")
    return doc["deployment"], files


def folder_changes(
    old: Collection[str] | None, new: Collection[str], present: Collection[str]
) -> tuple[list[str], list[str]]:
    """(the files of the previous render the new one drops, the files present where it writes
    that pdctl did not write). `old` None: a bundle of an older pdctl that kept no list, whose
    files at the new paths are its own and which removes nothing."""
    if old is None:
        return [], []
    return sorted(set(old) - set(new)), sorted(p for p in present if p not in old)


def bad_path(path: str) -> str | None:
    """Why `path` cannot be a file inside a bundle folder (None when it can): it must be
    relative, with no empty, `.` or `..` parts and no control characters."""
    if not path or path.startswith("/"):
        return "not a relative path"
    if any(ord(ch) < 32 or ch == "\x7f" for ch in path):
        return "has a control character"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return "has an empty, . or .. part"
    return None


def parse_manifest(text: str) -> tuple[str, ...]:
    """The paths of a `.pdctl-files` text (an older pdctl's list); ValueError("line N: PATH:
    why") for a line that does not name a file inside the folder (a damaged or planted list)."""
    paths = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line or line.startswith("#"):
            continue
        why = bad_path(line)
        if why is not None:
            raise ValueError(f"line {number}: {line!r}: {why}")
        paths.append(line)
    return tuple(paths)
