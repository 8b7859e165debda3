"""The base model every spec section uses: camelCase keys, unknown keys rejected, frozen."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")


class Section(BaseModel):
    """A spec section: YAML keys are camelCase, unknown keys are errors, values are frozen."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        alias_generator=to_camel,
        populate_by_name=True,
        use_attribute_docstrings=False,
    )


def _dns_label(value: str) -> str:
    if len(value) > 63 or not DNS1123_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a DNS-1123 label: use at most 63 lower-case letters, digits and "
            "'-', starting and ending with a letter or digit"
        )
    return value


def _env_name(value: str) -> str:
    if not ENV_NAME.match(value):
        raise ValueError(
            f"{value!r} is not an environment variable name: use letters, digits and '_', "
            "not starting with a digit"
        )
    return value


def _quantity(value: str) -> str:
    if not QUANTITY.match(str(value)):
        raise ValueError(
            f"{value!r} is not a Kubernetes quantity: write e.g. '8', '500m', '16Gi' or '64G'"
        )
    return str(value)


DnsLabel = Annotated[str, AfterValidator(_dns_label)]
EnvName = Annotated[str, AfterValidator(_env_name)]
Quantity = Annotated[str, AfterValidator(_quantity)]
