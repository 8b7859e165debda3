"""`pdctl schema`: the spec's JSON Schema, generated from the models."""

from __future__ import annotations

import json

import typer

from pdctl import __version__
from pdctl.spec.model import Spec

# The schema's name, one per pdctl version (the spec changes with pdctl). `.example` is a
# reserved domain (RFC 2606): the $id names the schema and is never fetched; editors read the
# file `pdctl schema` writes (docs/spec.md, "Editor support").
SCHEMA_ID = "https://pdctl.example/schema/spec-{version}.json"


def schema_id() -> str:
    return SCHEMA_ID.format(version=__version__)


def spec_schema() -> dict:
    schema = Spec.model_json_schema(by_alias=True, mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = schema_id()
    schema["title"] = "pdctl spec"
    return schema


def schema() -> None:
    """Print the spec's JSON Schema, for editors (yaml-language-server): `pdctl schema >
    pdctl-spec.schema.json` beside the specs `pdctl init` writes."""
    typer.echo(json.dumps(spec_schema(), indent=2, sort_keys=True))
