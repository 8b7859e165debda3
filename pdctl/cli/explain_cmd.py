"""`pdctl explain FIELD`: the text comes from pdctl/explain.py."""

from __future__ import annotations

import typer

from pdctl.explain import explain_text


def explain(
    field: str = typer.Argument(
        "", metavar="FIELD",
        help="Dotted spec path, camelCase as in YAML or snake_case: decode.share, "
        "kubernetes.storage.accessMode, hosts.gpus (or hosts[0].gpus). Empty: the top."),
) -> None:
    """Explain a spec field: type, default, allowed values, description, an example and,
    for a section, its fields (as `kubectl explain`)."""
    typer.echo(explain_text(field))
