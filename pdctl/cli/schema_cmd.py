"""`pdctl schema`: the spec's JSON Schema, generated from the models."""

from __future__ import annotations

import json

import typer


def spec_schema() -> dict:
    from pdctl.spec.model import Spec

    schema = Spec.model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "pdctl spec"
    return schema


def register(app: typer.Typer) -> None:
    @app.command("schema")
    def schema() -> None:
        """Print the spec's JSON Schema (for editors: yaml-language-server)."""
        typer.echo(json.dumps(spec_schema(), indent=2, sort_keys=True))
