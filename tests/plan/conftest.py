"""Helpers shared by the plan tests."""

from __future__ import annotations

from typing import Any

import yaml

from pdctl.plan import Plan, make_plan
from pdctl.spec import load_text


def plan_of(spec: str | dict[str, Any], name: str = "spec.yaml", **kw: Any) -> Plan:
    """make_plan (with KW) of a spec text, or of a document dumped as YAML in its key order."""
    text = spec if isinstance(spec, str) else yaml.safe_dump(spec, sort_keys=False)
    return make_plan(load_text(text, name)[0], **kw)
