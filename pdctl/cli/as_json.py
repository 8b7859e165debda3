"""`up --dry-run -o json`: the changes `up` would make, as one JSON document."""

from __future__ import annotations

import json
import sys
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import typer

if TYPE_CHECKING:
    from pdctl.targets.base import Target
    from pdctl.targets.state import Change


@dataclass
class JsonProgress:
    """An actions.Progress for `up --dry-run -o json`: steps on stderr, the changes kept for
    one JSON document on stdout (`print`)."""

    name: str
    kind: str = ""
    compared: bool = False
    changes: list[Change] = field(default_factory=list)

    def say(self, message: str) -> None:
        typer.echo(message, err=True)

    def planned(self, kind: str, changes: list[Change], compared: bool) -> None:
        self.kind, self.changes, self.compared = kind, list(changes), compared

    def confirm(self) -> bool:
        return False  # a dry run applies nothing

    def applying(self, target: Target) -> AbstractContextManager[object]:
        return nullcontext()

    def stage(self, report: Any) -> None:
        """Nothing is applied in a dry run, so no instance is waited for."""

    def document(self) -> dict[str, Any]:
        return {"name": self.name, "target": self.kind, "compared": self.compared,
                "changes": [asdict(c) for c in self.changes]}

    def print(self) -> None:
        sys.stdout.write(json.dumps(self.document(), indent=2) + "\n")
