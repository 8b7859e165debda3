"""A Bundle: the rendered artifacts, {relative path: text}, in a stable order."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Artifact:
    path: str
    text: str
    executable: bool = False


@dataclass(frozen=True)
class Bundle:
    """What render produces. `kind` is "kubernetes" (YAML documents) or "hosts" (scripts)."""

    kind: str
    artifacts: tuple[Artifact, ...] = field(default=())

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
