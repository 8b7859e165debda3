"""The spec layer: YAML -> validated, frozen models (no I/O beyond parsing given text).

The modules that define models keep their annotations as objects (no `from __future__ import
annotations`): pydantic would compile every annotation string when it creates the classes, a
cost every cold start pays (docs/performance.md). A validator returning its own class says so
in quotes."""

from pdctl.spec.load import load_text
from pdctl.spec.model import Spec
from pdctl.spec.source import Source, dotted

__all__ = ["Spec", "Source", "dotted", "load_text"]
