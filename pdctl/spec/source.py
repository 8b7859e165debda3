"""YAML text -> plain data plus the line of every key and list item (for error messages).

A spec is small, so hostile YAML is refused by size, not survived: the text, the nesting
depth, the length of one value and the number of nodes built (aliases and `<<` merges
expanded, so an alias bomb stops at the budget) are all bounded."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from pdctl.errors import SpecError

Loc = tuple[str | int, ...]

MAX_SPEC_BYTES = 256 * 1024  # the spec of a 10,000-instance fleet is about 160 KiB
MAX_DEPTH = 32  # mappings and lists inside each other; a spec needs about 6
MAX_NODES = 100_000  # keys, values and list items built, aliases and merges expanded
MAX_SCALAR = 4096  # characters in one key or value
# The pure-Python parser re-reads a bad spec for its error message only when it is this small
# (it is about 30x slower than libyaml): above it libyaml's own message is reported.
_RECHECK_BYTES = 16 * 1024
_MERGE = "tag:yaml.org,2002:merge"
# Control characters (newline, tab, NUL, ESC, C1 controls, ...) have no place in any spec
# key or value: a newline would end a comment line in a rendered script and start a command.
# Nor do the characters that reorder or break a line as a terminal or editor shows it: the
# bidi marks, embeddings, overrides and isolates (an `rm` that reads as `mr`) and the Unicode
# line and paragraph separators.
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def dotted(loc: Loc) -> str:
    """('hosts', 0, 'gpus') -> 'hosts[0].gpus'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


@dataclass(frozen=True)
class Source:
    """Where a spec came from: its file name (or '<stdin>') and the line of each path."""

    file: str
    lines: dict[Loc, int] = field(default_factory=dict)
    # A spec merged from overlays: the file that set each path, where it is not `file`.
    files: dict[Loc, str] = field(default_factory=dict)

    def line_of(self, loc: Loc) -> int | None:
        """The line of the longest known prefix of loc."""
        return self.where(loc)[1]

    def where(self, loc: Loc) -> tuple[str, int | None]:
        """The file and line of the longest known prefix of loc."""
        for end in range(len(loc), -1, -1):
            prefix = tuple(loc[:end])
            line = self.lines.get(prefix)
            if line is not None:
                return self.files.get(prefix, self.file), line
        return self.file, None

    def file_of(self, loc: Loc) -> str:
        """The file that set exactly loc (the spec's own file unless an overlay did)."""
        return self.files.get(loc, self.file)

    def where_dotted(self, path: str) -> tuple[str, int | None]:
        for loc in sorted(self.lines, key=len, reverse=True):
            if loc and (
                path == dotted(loc)
                or path.startswith(dotted(loc) + ".")
                or path.startswith(dotted(loc) + "[")
            ):
                return self.file_of(loc), self.lines[loc]
        return self.file, self.lines.get(())

    def locate(self, err: SpecError) -> SpecError:
        if not err.path:
            return err.located(self.file, None)
        return err.located(*self.where_dotted(err.path))


def parse(text: str, file: str) -> tuple[Any, Source]:
    """Parse one YAML document; SpecError (with the line) on syntax errors, duplicate keys and
    documents past the bounds above."""
    if not text.strip():
        raise SpecError(
            "the spec is empty", file=file, line=1, fix="start from `pdctl init > spec.yaml`"
        )
    if len(text) > MAX_SPEC_BYTES:
        raise too_big(file)
    loader = None
    lines: dict[Loc, int] = {}
    try:
        loader, node = _compose(text, file)
        if node is None:
            raise SpecError(
                "the spec holds no YAML document (only comments?)", file=file, line=1,
                fix="start from `pdctl init > spec.yaml`",
            )
        lines[()] = node.start_mark.line + 1
        data = _Builder(loader, lines, file).build(node, ())
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, file) from None
    except yaml.reader.ReaderError as exc:
        char = exc.character
        code = ord(char) if isinstance(char, str) else int(char)
        raise SpecError(
            f"character U+{code:04X} is not allowed in YAML", file=file,
            line=text.count("\n", 0, exc.position) + 1,
            fix="remove it, or write it as an escape in a double-quoted string",
        ) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"YAML error: {exc}", file=file) from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, Source(file=file, lines=lines)


def too_big(file: str, limit: int = MAX_SPEC_BYTES) -> SpecError:
    """A file past its size bound (a spec; `model.config`)."""
    return SpecError(
        f"is larger than {limit // 1024:,} KiB, more than pdctl reads", file=file,
        fix="check that this is the right file",
    )


def _syntax_error(exc: yaml.MarkedYAMLError, file: str) -> SpecError:
    mark = exc.problem_mark or exc.context_mark
    what = exc.problem or exc.context or "invalid YAML"
    if exc.context and exc.problem:
        what = f"{exc.context}, {exc.problem}"
    return SpecError(
        f"YAML syntax error: {what}", file=file, line=mark.line + 1 if mark else None,
        fix="check indentation, colons and quotes on this line",
    )


def _compose(text: str, file: str) -> tuple[Any, yaml.Node | None]:
    """The document's node tree, composed by libyaml when PyYAML has it (about 8x faster than
    the pure-Python parser on a 1,000-instance spec). On a YAML error in a small spec the
    pure-Python parser runs again, so error messages and lines do not depend on whether
    libyaml is present. Composing shares an alias's node, so it does not expand anything."""
    fast = getattr(yaml, "CSafeLoader", None)
    depth, deep_line = _flow_depth(text)
    if fast is not None and depth <= _C_DEPTH:
        loader = fast(text)
        try:
            return loader, loader.get_single_node()
        except yaml.YAMLError as exc:
            loader.dispose()
            if "nesting depth" in str(getattr(exc, "problem", "")):  # libyaml stops at 1,000
                raise _too_deep(file, exc.problem_mark) from None  # type: ignore[attr-defined]
            if len(text) > _RECHECK_BYTES:
                raise
    loader = yaml.SafeLoader(text)
    try:
        return loader, loader.get_single_node()
    except yaml.YAMLError:
        loader.dispose()
        raise
    except RecursionError:  # the pure-Python composer recurses once per level
        loader.dispose()
        raise _too_deep(file, None, deep_line) from None


# libyaml 0.2.5 (PyYAML 6.0.3's) sets no nesting limit and its composer recurses in C once per
# level: 40,000 levels overflow an 8 MiB stack (a crash, not an error).
_C_DEPTH = 1000


def _flow_depth(text: str) -> tuple[int, int | None]:
    """The deepest nesting of flow brackets, counted as if no bracket were quoted (so it can
    only overcount: a spec it flags is composed by the pure-Python parser, which refuses deep
    nesting with a RecursionError instead of overflowing the C stack), and the line where the
    nesting first passed MAX_DEPTH."""
    depth = deepest = 0
    line: int | None = None
    for match in re.finditer(r"[\[\]{}]", text):
        depth = depth + 1 if match.group() in "[{" else max(depth - 1, 0)
        if depth > deepest:
            deepest = depth
            if depth == MAX_DEPTH + 1:
                line = text.count("\n", 0, match.start()) + 1
    return deepest, line


def _too_deep(file: str, mark: Any, line: int | None = None) -> SpecError:
    return SpecError(
        f"is nested more than {MAX_DEPTH} levels deep", file=file,
        line=mark.line + 1 if mark is not None else line,
        fix="a spec nests mappings and lists a few levels deep: check the brackets",
    )


def control_character(text: str) -> str | None:
    """What is wrong with a spec string that holds a control or bidi character, or None.
    _Builder asks it of every key and value it reads."""
    bad = CONTROL.search(text)
    if bad is None:
        return None
    shown = text if len(text) <= 60 else text[:55] + "..."
    return f"{shown!r} holds the control character U+{ord(bad.group()):04X}"


class _Builder:
    """Node tree -> plain data, counting what it builds."""

    def __init__(self, loader: Any, lines: dict[Loc, int], file: str) -> None:
        self.loader = loader
        self.lines = lines
        self.file = file
        self.nodes = 0

    def refuse(self, node: yaml.Node, loc: Loc, what: str, fix: str = "") -> SpecError:
        return SpecError(
            what, path=dotted(loc), file=self.file, line=node.start_mark.line + 1, fix=fix
        )

    def count(self, node: yaml.Node, loc: Loc) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise self.refuse(
                node, loc,
                f"the spec expands to more than {MAX_NODES:,} keys, values and list items",
                "a spec needs far fewer: check its anchors (&) and aliases (*)",
            )
        if len(loc) > MAX_DEPTH:
            raise _too_deep(self.file, node.start_mark)

    def build(self, node: yaml.Node, loc: Loc) -> Any:
        self.count(node, loc)
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, loc)
        if isinstance(node, yaml.SequenceNode):
            items = []
            for i, item in enumerate(node.value):
                self.lines[loc + (i,)] = item.start_mark.line + 1
                items.append(self.build(item, loc + (i,)))
            return items
        return self.scalar(node, loc)

    def scalar(self, node: yaml.Node, loc: Loc) -> Any:
        if len(node.value) > MAX_SCALAR:
            raise self.refuse(
                node, loc,
                f"a value of {len(node.value):,} characters is longer than the "
                f"{MAX_SCALAR:,} pdctl reads",
                "shorten it",
            )
        value = self.loader.construct_object(node, deep=True)
        bad = control_character(value) if isinstance(value, str) else None
        if bad is not None:
            raise self.refuse(
                node, loc, bad, "write it on one line, without tabs, newlines or direction marks"
            )
        return value

    def key(self, node: yaml.Node, loc: Loc) -> str:
        key = self.scalar(node, loc) if isinstance(node, yaml.ScalarNode) else None
        if not isinstance(key, str):
            scalar = isinstance(node, yaml.ScalarNode)
            shown = repr(key) if scalar else "a " + getattr(node, "id", "collection")
            raise self.refuse(node, loc, f"keys must be strings (got {shown})")
        return key

    def mapping(self, node: yaml.MappingNode, loc: Loc) -> dict[str, Any]:
        """A mapping; `<<: *anchor` (or a list of anchors) merges mappings in, YAML 1.1 style:
        the mapping's own keys win, then earlier merged mappings over later ones."""
        out: dict[str, Any] = {}
        merged: list[yaml.MappingNode] = []
        seen: set[int] = {id(node)}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                merged += self.merge_sources(value_node, loc, seen)
                continue
            key = self.key(key_node, loc)
            if key in out:
                raise self.refuse(
                    key_node, loc + (key,), f"duplicate key {key!r}", "keep one of the two entries"
                )
            self.lines[loc + (key,)] = key_node.start_mark.line + 1
            out[key] = self.build(value_node, loc + (key,))
        for source in merged:
            for key_node, value_node in source.value:
                if key_node.tag == _MERGE:
                    continue  # merge_sources already brought its nested merges in
                key = self.key(key_node, loc)
                if key in out:
                    continue
                self.lines[loc + (key,)] = key_node.start_mark.line + 1
                out[key] = self.build(value_node, loc + (key,))
        return out

    def merge_sources(self, node: yaml.Node, loc: Loc, seen: set[int]) -> list[yaml.MappingNode]:
        """The mappings `<<:` names, each followed by the ones it merges itself. A mapping
        merged again (`<<: [*a, *a]`, or itself) adds nothing, so each is taken once: merging
        costs at most the size of the document, however the merges repeat."""
        self.count(node, loc)
        sources = node.value if isinstance(node, yaml.SequenceNode) else [node]
        out: list[yaml.MappingNode] = []
        for source in sources:
            if not isinstance(source, yaml.MappingNode):
                raise self.refuse(
                    source, loc, "`<<:` merges a mapping or a list of mappings", "use `<<: *name`"
                )
            self.count(source, loc)
            if id(source) in seen:
                continue
            seen.add(id(source))
            out.append(source)
            for key_node, value_node in source.value:
                if key_node.tag == _MERGE:
                    out += self.merge_sources(value_node, loc + ("<<",), seen)
        return out
