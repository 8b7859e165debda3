"""A generated corpus of hostile specs (issue 10): alias bombs, deep nesting, huge numbers,
non-finite floats, keys that look like pydantic's own tags, bidi and control characters,
overlong values. Each case names the phrase its one error line must hold and, where the
problem has one, its line."""

from __future__ import annotations

from dataclasses import dataclass

BASE = """\
name: t
phase: 0
model: {name: meta-llama/Llama-3.1-8B-Instruct, maxModelLen: 8192}
engine: {version: '0.33.0'}
hosts:
  - {name: gpu-a, address: 127.0.0.1, user: u, gpus: [0]}
serve: {replicas: 1, tensorParallel: 1}
"""
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass(frozen=True)
class Case:
    id: str
    text: str
    phrase: str
    line: int | None = None


def with_model(name: str = MODEL, **fields: str) -> str:
    """BASE with another model name or extra `model:` fields (flow style, on line 3)."""
    extra = "".join(f", {k}: {v}" for k, v in fields.items())
    text = BASE.replace("maxModelLen: 8192}", f"maxModelLen: 8192{extra}}}")
    return text.replace(MODEL, name)


def alias_bombs() -> list[Case]:
    out = []
    for levels in (6, 7, 9):
        rows = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
        rows += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels + 1)]
        out.append(Case(f"list-bomb-{levels}", "\n".join(rows) + "\n", "expands to more than"))
    rows = ["a0: &a0 {k0: x, k1: x, k2: x, k3: x, k4: x, k5: x, k6: x, k7: x, k8: x}"]
    rows += [
        f"a{i}: &a{i} {{{', '.join(f'k{j}: *a{i - 1}' for j in range(9))}}}" for i in range(1, 10)
    ]
    out.append(Case("mapping-bomb", "\n".join(rows) + "\n", "expands to more than"))
    # `<<` merges: each level merges the one before twice; one mapping of 2,000 keys merged
    # 20,000 times (a merge is taken once, so neither costs more than the document).
    rows = ["m0: &m0 {k0: 1}"]
    rows += [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}], k{i}: 1}}" for i in range(1, 31)]
    out.append(Case("merge-twice-30", "\n".join(rows) + "\n", "unknown key 'm0'", 1))
    rows = ["m0: &m0 {k0: 1}"]
    rows += [f"m{i}: &m{i} {{<<: *m{i - 1}, k{i}: 1}}" for i in range(1, 41)]
    out.append(Case("merge-chain-40", "\n".join(rows) + "\n", "nested more than 32"))
    wide = "{" + ", ".join(f"k{i}: 1" for i in range(2000)) + "}"
    many = "[" + ", ".join(["*b"] * 20_000) + "]"
    out.append(Case("merge-wide", f"b: &b {wide}\nx: {{<<: {many}}}\n", "unknown key 'b'", 1))
    # A bomb inside one field's value, and one as a (complex) key: no extra top-level keys.
    items = ["&b0 [y, y, y, y, y, y, y, y, y, y]"]
    items += [f"&b{i} [{', '.join([f'*b{i - 1}'] * 10)}]" for i in range(1, 6)]
    bomb = "[" + ", ".join(items) + "]"
    inner = BASE.replace("{version: '0.33.0'}", f"{{version: '0.33.0', extraArgs: {bomb}}}")
    out.append(Case("bomb-in-extra-args", inner, "expands to more than", 4))
    out.append(Case("bomb-as-key", BASE + f"? {bomb}\n: 1\n", "keys must be strings", 8))
    out.append(Case("cyclic-alias", "name: &a [*a]\n", "nested more than 32 levels", 1))
    out.append(Case("cyclic-merge", "a: &m {<<: *m}\n", "unknown key 'a'", 1))
    return out


def nesting() -> list[Case]:
    out = [
        Case(f"flow-list-{n}", "name: " + "[" * n + "]" * n + "\n", "nested more than", 1)
        for n in (40, 999, 1001, 3000, 100_000)
    ]
    out.append(Case("flow-map-3000", "a: " + "{a: " * 3000 + "1" + "}" * 3000 + "\n", "nested"))
    block = "".join(" " * i + f"k{i}:\n" for i in range(300)) + " " * 300 + "v\n"
    out.append(Case("block-map-300", block, "nested more than"))
    out.append(Case("dash-list-5000", "- " * 5000 + "x\n", "nested more than"))
    return out


def sizes() -> list[Case]:
    wide = "name: [" + "0," * 120_000 + "0]\n"  # 240 KiB, 120,001 nodes
    return [
        Case("comments-300k", BASE + "# padding\n" * 30_000, "larger than 256 KiB"),
        Case("model-name-10mb", with_model(name="m" * 10_000_000), "larger than 256 KiB"),
        Case("wide-list", wide, "expands to more than 100,000", 1),
    ]


def numbers() -> list[Case]:
    nines = "9" * 4301
    out = [
        Case("int-4301-digits", with_model(paramsBillion=nines), "longer than the 4,096", 3),
        Case("int-5000-digits", BASE.replace("8192", "9" * 5000), "longer than the 4,096", 3),
        Case("int-4000-digits", BASE.replace("8192", "9" * 4000), "must be <=", 3),
        Case("hex-4000-digits", BASE.replace("8192", "0x" + "f" * 4000), "must be <=", 3),
        Case("float-4000-digits", with_model(paramsBillion="9" * 4000), "too large", 3),
        Case("neg-int-4000", BASE.replace("replicas: 1", "replicas: -" + "9" * 4000), ">= 1", 7),
    ]
    for value in (".inf", "-.inf", ".nan", ".NaN", "1e999", "'inf'"):
        out.append(Case(f"params-{value}", with_model(paramsBillion=value), "finite", 3))
    extra = {
        "gpu-memory-gib": "hardware: {gpu: H100, gpuMemoryGib: .inf}\n",
        "requests-per-second": "workload: {requestsPerSecond: .inf}\n",
        "ttft": "workload: {ttftMs: .nan}\n",
        "tpot": "workload: {tpotMs: 1e999}\n",
        "utilization": None,
    }
    for name, tail in extra.items():
        text = (
            BASE + tail
            if tail
            else BASE.replace(
                "tensorParallel: 1}", "tensorParallel: 1, gpuMemoryUtilization: .nan}"
            )
        )
        out.append(Case(f"non-finite-{name}", text, "finite", 8 if tail else 7))
    return out


def keys() -> list[Case]:
    names = ["foo[1]", "function-after[x]", "function-x", "[", "]", "a[0].b", "list[str]"]
    out = [
        Case(f"unknown-key-{i}", BASE + f"'{key}': 1\n", "unknown key", 8)
        for i, key in enumerate(names)
    ]
    nested = BASE.replace("gpus: [0]}", "gpus: [0], 'x[0]': 1}")
    out.append(Case("unknown-nested-bracket-key", nested, "unknown key 'x[0]'", 6))
    out.append(Case("unknown-key-4000", BASE + f"? '{'k' * 4000}'\n: 1\n", "unknown key", 8))
    out.append(Case("non-string-key", BASE + "? [a, b]\n: 1\n", "keys must be strings", 8))
    return out


# Characters no value may hold: C0 and C1 controls, bidi marks, embeddings, overrides and
# isolates, Arabic letter mark, line and paragraph separators, NEL.
BAD_CHARS = (
    [0x01, 0x1B, 0x7F, 0x80, 0x85, 0x9B, 0x061C, 0x200E, 0x200F, 0x2028, 0x2029]
    + list(range(0x202A, 0x202F))
    + list(range(0x2066, 0x206A))
)


def text_values() -> list[Case]:
    out = []
    for code in BAD_CHARS:
        esc = f"\\u{code:04x}"
        where = {
            "model-name": with_model(name=f'"Llama{esc}-8B"'),
            "env-value": BASE.replace("'0.33.0'}", f"'0.33.0', env: {{A: \"x{esc}y\"}}}}"),
            "extra-arg": BASE.replace("'0.33.0'}", f"'0.33.0', extraArgs: [\"--x={esc}\"]}}"),
        }
        for field, text in where.items():
            out.append(
                Case(
                    f"U+{code:04X}-{field}",
                    text,
                    "control character",
                    3 if field == "model-name" else 4,
                )
            )
    # Written as they are (not escaped): what the YAML reader lets through reaches the check.
    for code in (0x202E, 0x2066, 0x200F):
        out.append(Case(f"raw-U+{code:04X}", with_model(name=f"Llama{chr(code)}-8B"), "U+", 3))
    out.append(Case("raw-U+0001", BASE.replace("name: t", "name: t\x01"), "not allowed", 1))
    # NEL breaks a line in YAML 1.1: mid-key it is a syntax error.
    out.append(Case("raw-U+0085-key", BASE + "a\x85b: 1\n", "YAML syntax error"))
    return out


def lengths() -> list[Case]:
    return [
        Case("model-name-1025", with_model(name="m" * 1025), "more than 1,024", 3),
        Case("model-name-4096", with_model(name="m" * 4096), "more than 1,024", 3),
        Case("served-name-2000", with_model(servedName="s" * 2000), "more than 1,024", 3),
        Case("revision-2000", with_model(revision="r" * 2000), "more than 1,024", 3),
        Case(
            "image-600",
            BASE.replace("'0.33.0'}", f"'0.33.0', image: {'i' * 600}}}"),
            "more than 512",
            4,
        ),
        Case(
            "env-value-5000",
            BASE.replace("'0.33.0'}", f"'0.33.0', env: {{A: {'v' * 5000}}}}}"),
            "longer than the 4,096",
            4,
        ),
        Case("host-name-4000", BASE.replace("name: gpu-a", "name: " + "g" * 4000), "DNS", 6),
    ]


def corpus() -> list[Case]:
    return alias_bombs() + nesting() + sizes() + numbers() + keys() + text_values() + lengths()


# Cases whose cost is the point: run as subprocesses under a memory limit and a timeout.
BOUNDED = {c.id for c in alias_bombs() + sizes()} | {
    "flow-list-3000",
    "flow-list-100000",
    "flow-map-3000",
    "dash-list-5000",
    "block-map-300",
    "int-4301-digits",
}
