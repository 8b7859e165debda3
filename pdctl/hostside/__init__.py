"""Programs pdctl ships to the hosts and runs there (standard library only, under the engine's
own python3), kept apart from the layers that run in pdctl: the plan copies their text into a
unit's files (package files, read with importlib.resources)."""
