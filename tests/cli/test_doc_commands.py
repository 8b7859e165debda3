"""Every `pdctl ...` command in README.md and docs/*.md is run or parsed by a test.

A command is a line in a fenced code block that starts with `pdctl ` or `$ pdctl `. Lines after
a `$ pdctl` line, up to the next `$ ` line or the end of the block, are its output as shown.

- Commands that need no live target run for real, in a temporary folder holding `examples/`
  and `tests/fixtures/` and the page's files (below): `init`, `validate`, `render`, `plan`,
  `schema`, `explain`, `version`, `--help`, `preflight --replay`, `up --dry-run --offline`.
  `pdctl ... > FILE` writes its output to FILE (so `pdctl init > spec.yaml` makes the spec the
  next lines use); a pipe (`| kubectl ...`) or `; ...` ends the pdctl part. The exit status
  must be the one the doc implies: the number after `echo exit $?`, else 2 when the output
  shown starts with `error:`, else 0. Shown output is compared line by line with whitespace
  normalised; a line `...` stands for any lines.
- Commands that need hosts or a cluster (up, down, status, logs, diff, top, preflight on
  hosts) are parsed by the real click command (`make_context`), so an option that does not
  exist or a missing argument fails. Their shown output is not checked.

Conventions for doc authors, an HTML comment on the line right before the fence:
    <!-- doc-test: files NAME=PATH ... -->   copy PATH (repository-relative) to NAME first
    <!-- doc-test: parse-only REASON -->     only parse this block's commands
    <!-- doc-test: skip REASON -->           neither run nor parse (keep these few)
Several directives go in one comment, separated by `;`. Placeholders in upper case (SPEC,
NAME, INSTANCE, DIR) are fine for commands that are parsed; SPEC stands for spec.yaml.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pdctl.cli.app import command as click_group
from pdctl.cli.app import take_debug
from tests.conftest import ROOT
from tests.helpers import run_cli, written

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"^\s*<!--\s*doc-test:(.*?)-->\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
CHAINED = re.compile(r"^(?:[^#]*?&&\s*)?(pdctl(?: .*)?)$")

# What `spec.yaml`, `rec/` ... stand for on each page unless a block's marker says otherwise.
DEFAULT_FILES = {"spec.yaml": "examples/phase0-conda.yaml", "rec": "tests/fixtures/gpu/h200x2-live"}
PAGE_FILES: dict[str, dict[str, str]] = {
    "phase1-kubernetes.md": {"spec.yaml": "examples/phase1-k8s.yaml"},
    "phase2-kubernetes.md": {"spec.yaml": "examples/phase2-llmd.yaml"},
    "phase3-hami.md": {"spec.yaml": "examples/phase3-hami.yaml"},
    "phase2-bare-metal.md": {"spec.yaml": "examples/phase2-mooncake-tcp.yaml"},
    # `--facts rec/` is a recording of the h200x2 spec's host (another machine's is refused).
    "capacity.md": {
        "vllm.log": "tests/fixtures/vllm/startup-docker.log",
        "spec.yaml": "tests/fixtures/gpu/h200x2-live/spec.yaml",
    },
    "placement.md": {"spec.yaml": "tests/fixtures/gpu/h200x2-live/spec.yaml"},
    "preflight.md": {"spec.yaml": "tests/fixtures/gpu/h200x2-live/spec.yaml"},
}

RUN = {"init", "validate", "render", "plan", "schema", "explain", "version"}
# Global options whose callback acts while parsing (installs into the user's shell): only
# checked to exist.
EAGER_GLOBAL = {"--install-completion", "--show-completion"}
PLACEHOLDERS = {"SPEC": "spec.yaml"}
MAX_SKIPS = 5


@dataclass
class Command:
    line: int
    text: str
    output: list[str] | None  # shown after a `$ pdctl` line; None: nothing shown


@dataclass
class Block:
    page: str
    line: int
    commands: list[Command]
    directives: dict[str, str] = field(default_factory=dict)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def parse_marker(text: str) -> dict[str, str]:
    out = {}
    for part in text.split(";"):
        word, _, rest = part.strip().partition(" ")
        if word:
            out[word] = rest.strip()
    return out


def blocks_of(path: Path, root: Path = ROOT) -> list[Block]:
    """The fenced blocks of a page that hold at least one pdctl command."""
    page = path.relative_to(root).as_posix().removeprefix("docs/")
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        if not FENCE.match(lines[i]):
            i += 1
            continue
        start, directives = i, {}
        before = lines[i - 1] if i else ""
        marker = MARKER.match(before)
        if marker:
            directives = parse_marker(marker.group(1))
        body: list[tuple[int, str]] = []
        i += 1
        while i < len(lines) and not FENCE.match(lines[i]):
            body.append((i + 1, lines[i]))
            i += 1
        i += 1
        commands = commands_of(body)
        if commands:
            found.append(Block(page, start + 1, commands, directives))
    return found


def commands_of(body: list[tuple[int, str]]) -> list[Command]:
    indent = min((len(t) - len(t.lstrip()) for _, t in body if t.strip()), default=0)
    commands: list[Command] = []
    current: Command | None = None
    for number, raw in body:
        text = raw[indent:]
        stripped = text.strip()
        if stripped.startswith("$ "):
            current = None
            if stripped.startswith("$ pdctl ") or stripped == "$ pdctl":
                current = Command(number, stripped[2:], [])
                commands.append(current)
        elif current is not None and current.output is not None:
            current.output.append(text.rstrip())
        elif match := CHAINED.match(stripped):  # `pdctl ...`, or `pip install . && pdctl ...`
            commands.append(Command(number, match.group(1), None))
    return commands


ALL_BLOCKS = [b for page in PAGES for b in blocks_of(page)]


def split_command(text: str) -> tuple[list[str], str | None]:
    """argv after `pdctl` up to a pipe, `;` or `&&`, and the file a `>` redirects to."""
    words = shlex.split(text, comments=True)[1:]
    argv, redirect = [], None
    for n, word in enumerate(words):
        if word in ("|", ";", "&&", "||") or word.endswith(";"):
            if word.endswith(";") and word != ";":
                argv.append(word[:-1])
            break
        if word == ">":
            redirect = words[n + 1]
            break
        if word.startswith("2>"):
            break
        argv.append(PLACEHOLDERS.get(word, word))
    return argv, redirect


def runnable(argv: list[str]) -> bool:
    name = next((a for a in argv if not a.startswith("-")), None)
    if "--help" in argv or "-h" in argv or argv == ["--version"]:
        return True
    if name in RUN:
        return True
    if name == "up":
        return "--dry-run" in argv and "--offline" in argv
    if name == "preflight":
        return "--replay" in argv
    return False


def parse(argv: list[str]) -> None:
    """Parse ARGV with the real click commands; a usage error raises."""
    group = click_group()
    argv, _ = take_debug(argv)
    if argv and argv[0] in EAGER_GLOBAL:
        names = {opt for p in group.params for opt in p.opts}
        assert argv[0] in names, f"pdctl has no option {argv[0]}"
        return
    try:
        ctx = group.make_context("pdctl", list(argv), resilient_parsing=False)
        rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
        name, cmd, args = group.resolve_command(ctx, rest)
        assert cmd is not None, f"no command {name}"
        cmd.make_context(name, args, parent=ctx, resilient_parsing=False)
    except RuntimeError as done:  # --help or --version act while parsing: typer's Exit
        code = getattr(done, "exit_code", None)
        assert code == 0, f"{done!r} while parsing"


def expected_exit(command: Command) -> int:
    shown = command.output or []
    for line in shown:
        match = re.fullmatch(r"exit (\d+)", line.strip())
        if match:
            return int(match.group(1))
    return 2 if shown and shown[0].strip().startswith("error:") else 0


def shown_matches(shown: list[str], actual: str) -> bool:
    """SHOWN against ACTUAL with all whitespace (line breaks too) collapsed, so a doc may wrap
    a long line; a line `...` in SHOWN stands for any text."""
    segments, current = [], []
    for line in shown:
        if line.strip() == "...":
            segments.append(" ".join(current))
            current = []
        elif not re.fullmatch(r"exit \d+", line.strip()):
            current.append(line)
    segments.append(" ".join(current))
    pattern = r"\s*.*?\s*".join(re.escape(" ".join(s.split())) for s in segments)
    return re.fullmatch(pattern, " ".join(actual.split()), re.DOTALL) is not None


def prepare(tmp: Path, block: Block) -> None:
    for name in ("examples", "tests/fixtures"):
        shutil.copytree(ROOT / name, tmp / name)
    files = {**DEFAULT_FILES, **PAGE_FILES.get(block.page, {})}
    for item in block.directives.get("files", "").split():
        name, _, path = item.partition("=")
        files[name] = path
    for name, path in files.items():
        source, target = ROOT / path, tmp / name
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(source, target)


def check_block(block: Block, tmp: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Run or parse every command of BLOCK in TMP; the problems found, one line each."""
    prepare(tmp, block)
    parse_only = "parse-only" in block.directives
    problems = []
    for command in block.commands:
        where = f"{block.page}:{command.line}: `{command.text}`"
        argv, redirect = split_command(command.text)
        try:
            parse(argv)
        except Exception as exc:  # click's UsageError/BadParameter, or an assertion above
            problems.append(f"{where}: does not parse: {exc}")
            continue
        if parse_only or not runnable(argv):
            continue
        code, out, err = run_cli(argv, capsys)
        if redirect:
            (tmp / redirect).write_text(out)
        want = expected_exit(command)
        if code != want:
            problems.append(f"{where}: exit {code}, the doc implies {want}: {(err or out)[-400:]}")
            continue
        shown = command.output
        if shown and not any(shown_matches(shown, t) for t in (out, err, err + out, out + err)):
            problems.append(f"{where}: the output differs from the doc:\n{err}{out}")
    return problems


def test_the_docs_have_commands() -> None:
    assert len(ALL_BLOCKS) >= 20
    assert sum(len(b.commands) for b in ALL_BLOCKS) >= 60


def test_skips_carry_a_reason_and_are_few() -> None:
    skipped = [b for b in ALL_BLOCKS if "skip" in b.directives or "parse-only" in b.directives]
    for block in skipped:
        reason = block.directives.get("skip") or block.directives.get("parse-only")
        assert reason, f"{block.id}: a doc-test skip or parse-only needs a reason"
    assert sum("skip" in b.directives for b in ALL_BLOCKS) <= MAX_SKIPS


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[b.id for b in ALL_BLOCKS])
def test_doc_command(block: Block, tmp_path: Path, monkeypatch, capsys) -> None:
    if "skip" in block.directives:
        pytest.skip(block.directives["skip"])
    monkeypatch.chdir(tmp_path)
    for name in ("NO_COLOR", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "100")
    problems = check_block(block, tmp_path, capsys)
    assert not problems, "\n".join(problems)


# The harness itself: a drifted doc must fail it.
DRIFTED = """\
```
pdctl render spec.yaml --no-such-option
pdctl status spec.yaml --no-such-option
pdctl up spec.yaml --dry-run --offline
pdctl explain serve.replica
$ pdctl validate spec.yaml
spec.yaml: ok: something else entirely
```
"""


def test_the_harness_finds_drift(tmp_path: Path, monkeypatch, capsys) -> None:
    page = written(tmp_path / "drift.md", DRIFTED)
    (block,) = blocks_of(page, tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    problems = check_block(block, work, capsys)
    assert len(problems) == 4, problems
    assert "no such option" in problems[0].lower()
    assert "no such option" in problems[1].lower()
    assert "exit 2, the doc implies 0" in problems[2]
    assert "output differs" in problems[3]


def inline_commands(path: Path) -> list[tuple[int, str]]:
    """`pdctl ...` code spans in a page's prose (outside fenced blocks), with their line."""
    out, fenced = [], False
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out += [(number, m) for m in re.findall(r"`(pdctl [^`]+)`", line)]
    return out


def unknown_options(text: str) -> list[str]:
    """The options in TEXT (a prose mention of a command, perhaps without its arguments) that
    its command does not have."""
    group = click_group()
    words = text.split("|")[0].split()[1:]
    name = next((w for w in words if not w.startswith("-")), None)
    commands = group.commands  # type: ignore[attr-defined]
    known = {"--help", "-h"} | {o for p in group.params for o in p.opts + p.secondary_opts}
    if name in commands:
        known |= {o for p in commands[name].params for o in p.opts + p.secondary_opts}
    elif name is not None and name.isidentifier() and name.islower():
        return [f"no command {name}"]
    options = [w.split("=")[0] for w in words if w.startswith("-") and w != "-"]  # - is stdin
    return [o for o in options if o not in known]


def test_commands_in_prose_name_real_options() -> None:
    """`pdctl render --output-dir DIR` in a sentence: render must have --output-dir."""
    wrong = [
        f"{page.name}:{number}: `{text}`: {', '.join(bad)}"
        for page in PAGES
        for number, text in inline_commands(page)
        if (bad := unknown_options(text))
    ]
    assert not wrong, "\n".join(wrong)


def test_prose_check_finds_a_removed_option() -> None:
    assert unknown_options("pdctl render spec.yaml --out DIR") == ["--out"]
    assert unknown_options("pdctl rendr spec.yaml") == ["no command rendr"]
    assert unknown_options("pdctl render SPEC --output-dir DIR | kubectl apply -f -") == []
