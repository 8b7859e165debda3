"""The spec layer: YAML -> validated, frozen models (no I/O beyond parsing given text)."""

from pdctl.spec.load import load_text
from pdctl.spec.model import Spec
from pdctl.spec.source import Source, dotted

__all__ = ["Spec", "Source", "dotted", "load_text"]
