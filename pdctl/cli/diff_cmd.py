"""`pdctl diff`: what `up` would change, changing nothing. Exit 0: no changes, 1: changes,
2: an error (as `diff` and `kubectl diff` do)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from pdctl import actions
from pdctl.cli.connect import ConnectFlags, connection
from pdctl.cli.options import DEPLOYED_BUNDLE, FACTS, PHASE, SPEC, TARGET
from pdctl.cli.progress import KUBE_WORDS, ConsoleProgress
from pdctl.cli.specfile import load, with_overlays
from pdctl.cli.term import console
from pdctl.errors import PdctlError

if TYPE_CHECKING:
    from pdctl.actions import Diff

KUBE_ORDER = ("create", "update", "prune", "unchanged")


@with_overlays
@connection()
def diff(conn: ConnectFlags, spec: str = SPEC, phase: int | None = PHASE,
         target: str | None = TARGET, facts: Path | None = FACTS,
         wheels: Path | None = DEPLOYED_BUNDLE) -> None:
    """Show what `up` would change: on Kubernetes a server-side dry run of every object
    diffed against the live one (and what prune would delete); on hosts each instance to
    start, replace or stop, with the files that differ. Exit 0: none, 1: changes, 2: error."""
    err = console(stderr=True, log_path=False)  # NO_COLOR / TERM=dumb: no escapes
    try:
        plan, bundle = load(spec, phase, target, facts, wheels)
        found = actions.diff(plan, bundle, conn.target(dry_run=True), ConsoleProgress(err))
    except PdctlError as exc:
        exc.exit_code = 2  # 1 means "there are changes"
        raise
    for line in report(found):
        typer.echo(line, nl=False)
    raise typer.Exit(1 if found.todo else 0)


def report(found: Diff) -> list[str]:
    """The lines `pdctl diff` prints: per change a header line, then its unified diff; last a
    count per action."""
    out: list[str] = []
    counts: dict[str, int] = {}
    kube = found.kind == "kubernetes"
    for c in found.changes:
        word = KUBE_WORDS[c.action] if kube else c.action
        key = c.unit if kube else f"{c.host}/{c.unit}"
        head = f"{word:9} {c.unit}" + ("" if kube else f" on {c.host} ({c.why})")
        counts[word] = counts.get(word, 0) + 1
        if c.action == "keep":
            continue
        out.append(head + "\n")
        out.append(found.texts.get(key, ""))
    order = KUBE_ORDER if kube else ("start", "restart", "stop", "keep")
    summary = ", ".join(f"{counts[w]} {w}" for w in order if counts.get(w))
    out.append(f"{summary or 'nothing deployed, nothing to deploy'}\n")
    if not found.todo:
        out.append("no changes\n")
    return out
