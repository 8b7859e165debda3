"""Programs pdctl ships to the hosts and runs there (standard library only, under the engine's
own python3), kept apart from the layers that run in pdctl: the plan copies their text into a
unit's files (package files, read with importlib.resources)."""

from functools import cache
from importlib import resources


@cache
def source(name: str) -> str:
    """The text of one of these programs (`group_guard.py`, `router_watch.py`)."""
    return resources.files(__name__).joinpath(name).read_text()
