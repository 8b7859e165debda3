"""Secret values for `up`, `restart`, `scale` and `autoscale`: read from the local
environment, the only place they come from (the spec names the variables), and sent to the
hosts' secrets files."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from pdctl.errors import PdctlError

if TYPE_CHECKING:
    from pdctl.plan.model import Plan


def read_secrets(plan: Plan) -> dict[str, str]:
    """Secret values from the local environment (the only place they come from)."""
    values = {}
    for secret in plan.secrets:
        value = os.environ.get(secret.source)
        if value is None:
            raise PdctlError(
                f"secret {secret.name}: environment variable {secret.source} is not set; "
                "export it, then run pdctl again")
        values[secret.name] = value
    return values
