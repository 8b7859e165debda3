"""Overlays: a base spec deep-merged with per-environment files (`--overlay prod.yaml`).

The rules (docs/spec.md, "Overlays"):
- mappings merge key by key; an overlay's scalar or list replaces the base's value;
- `key: null` in an overlay removes the key (the field's default applies again);
- `hosts` merge by `name`: an overlay entry whose name the base has changes that host (its
  keys merged as above), a new name is appended, and `{name: x, $delete: true}` removes host x.

The merged Source remembers, for every path, the file and line that set it, so an error in a
merged value names the overlay's line, not the base's. Pure: no I/O.
"""

from __future__ import annotations

from typing import Any

from pdctl.errors import SpecError
from pdctl.spec.source import Loc, Source, dotted

DELETE = "$delete"
KEYED_LISTS: dict[Loc, str] = {
    ("hosts",): "name"
}  # lists merged entry by entry, keyed by this field


def merge(base: tuple[Any, Source], *overlays: tuple[Any, Source]) -> tuple[Any, Source]:
    """The base with each overlay applied in order (later overlays win)."""
    data, source = base
    for over, over_source in overlays:
        if not isinstance(over, dict):
            raise SpecError(
                "an overlay must be a mapping of keys, as a spec is", file=over_source.file,
                line=over_source.lines.get(()),
                fix="write the keys to change, e.g. `kubernetes: {namespace: prod}`",
            )
        data, source = _Merge(source, over_source).run(data, over)
    return data, source


class _Merge:
    """One overlay onto one (possibly already merged) base."""

    def __init__(self, base: Source, over: Source) -> None:
        self.base = base
        self.over = over
        self.lines: dict[Loc, int] = {}
        self.files: dict[Loc, str] = {}

    def run(self, data: Any, over: Any) -> tuple[Any, Source]:
        self.mark((), self.base, ())
        merged = self.value(data, (), over, (), ())
        return merged, Source(file=self.base.file, lines=self.lines, files=self.files)

    def mark(self, out: Loc, source: Source, loc: Loc) -> None:
        line = source.lines.get(loc)
        if line is None:
            return
        self.lines[out] = line
        file = source.file_of(loc)
        if file != self.base.file:
            self.files[out] = file

    def take(self, value: Any, out: Loc, source: Source, loc: Loc) -> Any:
        """A whole value from one source, with the lines of everything inside it."""
        self.mark(out, source, loc)
        if isinstance(value, dict):
            for key, item in value.items():
                self.take(item, out + (key,), source, loc + (key,))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                self.take(item, out + (i,), source, loc + (i,))
        return value

    def value(self, base: Any, bloc: Loc, over: Any, oloc: Loc, out: Loc) -> Any:
        if isinstance(base, dict) and isinstance(over, dict):
            return self.mapping(base, bloc, over, oloc, out)
        key = KEYED_LISTS.get(out)
        if key is not None and isinstance(base, list) and isinstance(over, list):
            return self.keyed(base, bloc, over, oloc, out, key)
        return self.take(over, out, self.over, oloc)

    def mapping(self, base: dict, bloc: Loc, over: dict, oloc: Loc, out: Loc) -> dict:
        merged: dict[str, Any] = {}
        for key, item in base.items():
            if key not in over:
                merged[key] = self.take(item, out + (key,), self.base, bloc + (key,))
            elif over[key] is not None:  # null removes the key
                self.mark(out + (key,), self.base, bloc + (key,))  # a replaced value re-marks
                merged[key] = self.value(
                    item, bloc + (key,), over[key], oloc + (key,), out + (key,)
                )
        for key, item in over.items():
            if key not in base and item is not None:
                merged[key] = self.take(item, out + (key,), self.over, oloc + (key,))
        return merged

    def keyed(self, base: list, bloc: Loc, over: list, oloc: Loc, out: Loc, key: str) -> list:
        # Each entry: (base index, None) kept as is, (base index, overlay index) merged, or
        # (None, overlay index) added.
        entries: list[tuple[int | None, int | None]] = [(i, None) for i in range(len(base))]
        index = {item.get(key): i for i, item in enumerate(base) if isinstance(item, dict)}
        deleted: set[int] = set()
        named: set[Any] = set()
        for j, item in enumerate(over):
            name, delete = self.entry(item, oloc + (j,), key)
            if name in named:
                raise self.refuse(
                    oloc + (j, key), f"{key} {name!r} is listed twice in this overlay",
                    "merge the two entries into one",
                )
            named.add(name)
            at = index.get(name)
            if at is not None:
                if delete:
                    deleted.add(at)
                else:
                    entries[at] = (at, j)
            elif delete:
                raise self.refuse(
                    oloc + (j, DELETE), f"no entry with {key} {name!r} in the spec to delete",
                    f"check the {key}; entries: {', '.join(map(str, index)) or 'none'}",
                )
            else:
                entries.append((None, j))
        merged = []
        kept = (e for n, e in enumerate(entries) if n not in deleted)
        for pos, (b, o) in enumerate(kept):
            spot = out + (pos,)
            if o is None and b is not None:
                merged.append(self.take(base[b], spot, self.base, bloc + (b,)))
                continue
            assert o is not None
            item = {k: v for k, v in over[o].items() if k != DELETE}
            if b is None:
                merged.append(self.take(item, spot, self.over, oloc + (o,)))
            else:
                self.mark(spot, self.base, bloc + (b,))
                merged.append(self.value(base[b], bloc + (b,), item, oloc + (o,), spot))
        return merged

    def entry(self, item: Any, loc: Loc, key: str) -> tuple[Any, bool]:
        """An overlay entry of a keyed list: its key, and whether it deletes."""
        if not isinstance(item, dict) or key not in item:
            raise self.refuse(
                loc,
                f"an overlay entry of {dotted(loc[:-1])} needs `{key}`: entries are merged by it",
                f"add `{key}:` naming the entry to change, add or delete",
            )
        delete = item.get(DELETE, False)
        if not isinstance(delete, bool):
            raise self.refuse(loc + (DELETE,), f"`{DELETE}` takes true or false", "")
        return item[key], delete

    def refuse(self, loc: Loc, what: str, fix: str) -> SpecError:
        file, line = self.over.where(loc)
        return SpecError(what, path=dotted(loc), file=file, line=line, fix=fix)
