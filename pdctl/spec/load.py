"""Spec text -> a validated Spec, or SpecError(s) that name file, line, field and fix.

Every independent problem is reported (up to MAX_PROBLEMS): pydantic's errors of one
validation, and the sections whose own checks raise SpecError (each such section is set
aside and the rest validated again)."""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pydantic import ValidationError

from pdctl.errors import SpecError
from pdctl.spec.base import PATTERNS, booleans_for_numbers
from pdctl.spec.model import Spec
from pdctl.spec.source import Loc, Source, dotted, parse
from pdctl.spec.value import secret_like
from pdctl.spec.walk import model_at, section

NO_PLUGINS = "PYDANTIC_DISABLE_PLUGINS"


@contextmanager
def plugins_off() -> Iterator[None]:
    """pydantic with its plugins off while validators are built: looking for plugins reads every
    installed package's entry points (20-45 ms of a cold render; docs/performance.md)."""
    old = os.environ.get(NO_PLUGINS)
    os.environ[NO_PLUGINS] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ[NO_PLUGINS]
        else:
            os.environ[NO_PLUGINS] = old


MAX_PROBLEMS = 20  # lines a user reads; the rest is counted
_BOOL_FIX = "write a number: YAML reads yes, no, on, off, true and false as booleans"


class SpecErrors(SpecError):
    """Several independent problems of one spec, each a located SpecError. `line()` is the
    first (for callers that print one line); `lines()` is every one, capped."""

    def __init__(self, problems: list[SpecError]) -> None:
        first = problems[0]
        super().__init__(
            first.message, path=first.path, file=first.file, line=first.line_no, fix=first.fix
        )
        self.problems = problems

    def located(self, file: str, line: int | None) -> SpecError:
        return self  # each problem already names its file and line

    def lines(self) -> list[str]:
        shown = [p.line() for p in self.problems[:MAX_PROBLEMS]]
        more = len(self.problems) - MAX_PROBLEMS
        if more > 0:
            shown.append(
                f"{self.file}: ... and {more} more {'problem' if more == 1 else 'problems'}"
            )
        return shown


def raise_all(problems: list[SpecError]) -> None:
    """Raise the problems found: the one SpecError itself, or SpecErrors for several."""
    if len(problems) == 1:
        raise problems[0]
    if problems:
        raise SpecErrors(problems)


def load_text(text: str, file: str = "<stdin>") -> tuple[Spec, Source]:
    """Parse and validate spec text. Raises SpecError located at file:line."""
    data, source = parse(text, file)
    return load_data(data, source), source


def load_data(data: Any, source: Source) -> Spec:
    """Validate parsed spec data (one file, or a base merged with overlays)."""
    if not isinstance(data, dict):
        raise SpecError(
            f"the spec must be a mapping of keys (got {_kind(data)})", file=source.file,
            line=source.lines.get(()), fix="start from `pdctl init > spec.yaml`",
        )
    problems = [
        SpecError(message, path=dotted(loc), file=file, line=line, fix=_BOOL_FIX)
        for loc, message in booleans_for_numbers(data, Spec)
        for file, line in [source.where(loc)]
    ]
    booleans = {p.path for p in problems}
    aside: set[str] = set()  # top-level sections whose own checks failed
    current = data
    while True:
        try:
            spec = Spec.model_validate(current)
        except ValidationError as exc:
            found = _to_spec_errors(exc, source, current, aside)
            problems += [p for p in found if p.path not in booleans]
            break
        except SpecError as exc:
            problems.append(source.locate(exc))
            top = exc.path.split(".", 1)[0].split("[", 1)[0]
            if top not in current:
                break
            aside.add(top)
            current = {k: v for k, v in current.items() if k != top}
            continue
        if not problems:
            return spec
        break
    raise_all(sorted(problems, key=lambda p: (p.file != source.file, p.file, p.line_no or 0)))
    raise AssertionError("unreachable")


def _kind(value: Any) -> str:
    if isinstance(value, _Hidden):
        kind = _kind(value.value).split(" (", 1)[0]
        return kind if kind in ("a mapping", "a list", "nothing (null)") else f"{kind}, not shown"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, (int, float)):
        return f"a number ({_show(value)})"
    return f"a string ({_show(value)})"


def _show(value: Any, limit: int = 60) -> str:
    """repr(value), shortened: an error line quotes what it got, not 4,000 characters of it."""
    text = repr(value) if not isinstance(value, int) or abs(value) < 10**limit else "a huge number"
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-1]}"


def _to_spec_errors(
    exc: ValidationError, source: Source, data: Any, aside: set[str]
) -> list[SpecError]:
    errors = exc.errors(include_url=False)
    for e in errors:
        e["loc"] = _clean(e["loc"], data)
    # A section set aside is "missing" only because it was set aside.
    errors = [e for e in errors if not (e["type"] == "missing" and e["loc"][:1] in _tops(aside))]
    # A misspelt key also makes the real key "missing": report the misspelling.
    typo_parents = {e["loc"][:-1] for e in errors if e["type"] == "extra_forbidden"}
    errors = [
        e for e in errors if not (e["type"] == "missing" and e["loc"][:-1] in typo_parents)
    ] or errors
    errors.sort(key=lambda e: source.line_of(e["loc"]) or 0)
    out: list[tuple[Loc, str, str]] = []
    seen: set[Loc] = set()
    strays: dict[Loc, list[str]] = {}  # unknown keys without a near name, by mapping
    for err in errors:
        loc = err["loc"]
        if loc in seen:  # the members of a union each fail at one place: report it once
            continue
        seen.add(loc)
        message, fix = _explain(err, loc)
        if err["type"] == "extra_forbidden" and fix.startswith("allowed keys"):
            # One line per mapping, as they share the fix (and a hostile spec with thousands
            # of stray keys is still one line).
            strays.setdefault(loc[:-1], []).append(_show(loc[-1]))
            if len(strays[loc[:-1]]) > 1:
                continue
        out.append((loc, message, fix))
    problems = []
    for loc, message, fix in out:
        keys = strays.get(loc[:-1], []) if message.startswith("unknown key") else []
        if len(keys) > 1:
            shown = ", ".join(keys[1:6]) + (", ..." if len(keys) > 6 else "")
            message += f", and {len(keys) - 1} more ({shown})"
        file, line = source.where(loc)
        problems.append(SpecError(message, path=dotted(loc), file=file, line=line, fix=fix))
    return problems


def _tops(names: set[str]) -> set[Loc]:
    return {(n,) for n in names}


def _clean(loc: tuple, data: Any) -> Loc:
    """Drop pydantic's union-member and validator tags from a location. A part that is a key
    (or index) of the spec's data is the user's, whatever it looks like (`a[0]`, `function-x`)."""
    out: list[str | int] = []
    node = data
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif isinstance(part, str) and ("[" in part or part.startswith("function-")):
            continue
        else:
            node = None
        out.append(part)
    return tuple(out)


class _Hidden:
    """A value an error line must not show: what was written under `secrets` or a field whose
    name says secret (a pasted token)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __repr__(self) -> str:
        return "(not shown)"


def _secret_place(loc: Loc) -> bool:
    return bool(loc) and (loc[0] == "secrets" or any(
        isinstance(part, str) and secret_like(part) for part in loc
    ))


# What a reference under `secrets` reads like, by the variable each one is exported as.
_REFERENCE = {"hfToken": "HF_TOKEN", "apiKey": "VLLM_API_KEY"}


def _explain(err: Any, loc: Loc) -> tuple[str, str]:
    """_explain_value's message and fix, never showing a value written in a secret's place."""
    if not _secret_place(loc) or isinstance(err.get("input"), (dict, list, _Hidden)):
        return _explain_value(err, loc)
    got = err.get("input")
    if err["type"] in ("model_type", "model_attributes_type", "dict_type") and len(loc) == 2:
        env = _REFERENCE.get(str(loc[1]), "VARIABLE")
        return (
            f"must be a reference, not the value itself (got {_kind(_Hidden(got))})",
            f"write {{env: {env}}} and export the value in {env} (on Kubernetes add "
            "secretName: NAME, secretKey: KEY of an existing Secret); rotate it if this file "
            "was shared",
        )
    if loc == ("secrets",):
        return (
            f"must be a mapping of references, not a value (got {_kind(_Hidden(got))})",
            "write secrets: {hfToken: {env: HF_TOKEN}, apiKey: {env: VLLM_API_KEY}}",
        )
    message, fix = _explain_value({**err, "input": _Hidden(got)}, loc)
    # A validator's own message quotes the value: take it out (a short one could be any word).
    for shown in [repr(got), str(got)] if len(str(got)) >= 6 else []:
        message, fix = message.replace(shown, "(not shown)"), fix.replace(shown, "(not shown)")
    return message, fix


def _explain_value(err: Any, loc: Loc) -> tuple[str, str]:
    kind = err["type"]
    ctx = err.get("ctx") or {}
    got = err.get("input")
    if kind == "missing":
        return "a required field is missing", f"add `{loc[-1]}:`" if loc else ""
    if kind == "extra_forbidden" and loc:
        key = _show(loc[-1])
        allowed = sorted(_allowed_keys(loc[:-1]))
        close = difflib.get_close_matches(str(loc[-1]), allowed, n=1, cutoff=0.6)
        if close:
            return f"unknown key {key}", f"did you mean {close[0]!r}?"
        elsewhere = _nested_match(loc[:-1], str(loc[-1]))
        if elsewhere:
            return (
                f"unknown key {_show(loc[-1])}",
                f"did you mean {elsewhere!r} (in another section)?",
            )
        return f"unknown key {key}", "allowed keys: " + ", ".join(allowed)
    if kind in ("greater_than_equal", "greater_than", "less_than_equal", "less_than"):
        sign = {
            "greater_than_equal": ">=", "greater_than": ">", "less_than_equal": "<=",
            "less_than": "<",
        }[kind]
        bound = next(iter(ctx.values()))
        return f"must be {sign} {bound} (got {_show(got)})", ""
    if kind == "literal_error":
        return f"must be one of {ctx.get('expected')} (got {_show(got)})", ""
    if kind == "spec_value":
        return str(ctx.get("what", err["msg"])), str(ctx.get("fix", ""))
    if kind == "string_pattern_mismatch":
        what, fix = PATTERNS.get(
            str(ctx.get("pattern")), (f"of the form {ctx.get('pattern')}", "see `pdctl explain`")
        )
        return f"{_show(got)} is not {what}", fix
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be a whole number (got {_kind(got)})", ""
    if kind == "finite_number":
        return f"must be a finite number (got {_show(got)})", "write a number, not .inf or .nan"
    if kind in ("float_type", "float_parsing") and type(got) is int:
        return "is too large a number", ""
    if kind in ("float_type", "float_parsing"):
        return f"must be a number (got {_kind(got)})", ""
    if kind in ("bool_type", "bool_parsing"):
        return f"must be true or false (got {_kind(got)})", ""
    if kind in ("string_type",):
        return f"must be a string (got {_kind(got)})", "quote the value"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"must be a mapping of keys (got {_kind(got)})", ""
    if kind in ("tuple_type", "list_type"):
        return f"must be a list (got {_kind(got)})", "write it as [a, b] or one '- item' per line"
    if kind == "string_too_short":
        return "must not be empty", ""
    if kind == "value_error":
        return str(ctx.get("error", err["msg"])), ""
    return err["msg"], ""


def _nested_match(loc: Loc, key: str) -> str | None:
    """A key that belongs one level deeper, e.g. top-level `replicas` -> `serve.replicas`."""
    model = model_at(loc, Spec)
    if model is None:
        return None
    candidates: list[str] = []
    for name, field in model.model_fields.items():
        inner = section(field.annotation)
        if inner is not None:
            candidates += [
                f"{field.alias or name}.{f.alias or n}" for n, f in inner.model_fields.items()
            ]
    by_leaf = {c.rsplit(".", 1)[1]: c for c in reversed(candidates)}
    close = difflib.get_close_matches(key, list(by_leaf), n=1, cutoff=0.8)
    return by_leaf[close[0]] if close else None


def _allowed_keys(loc: Loc) -> set[str]:
    """The camelCase keys the model at loc accepts."""
    model = model_at(loc, Spec)
    if model is None:
        return set()
    return {f.alias or n for n, f in model.model_fields.items()}
