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


MANIFEST_HEADER = "# files pdctl render -o wrote here; the next render removes the ones it drops"


def manifest(paths: list[str] | tuple[str, ...]) -> str:
    """The text of a bundle folder's file list (`.pdctl-files`): one relative path a line."""
    return MANIFEST_HEADER + "\n" + "".join(f"{p}\n" for p in sorted(set(paths)))


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
    """The paths of a `.pdctl-files` text; ValueError("line N: PATH: why") for a line that does
    not name a file inside the folder (a damaged or planted list)."""
    paths = []
    for number, line in enumerate(text.split("\n"), start=1):
        if not line or line.startswith("#"):
            continue
        why = bad_path(line)
        if why is not None:
            raise ValueError(f"line {number}: {line!r}: {why}")
        paths.append(line)
    return tuple(paths)
