"""pdctl's end-to-end KV capacity against real vLLM start-up logs: the error distribution.

    python -m benchmarks.capacity_logs            # the markdown table and the summary
    python -m benchmarks.capacity_logs --summary  # the summary only
    python -m benchmarks.capacity_logs --summary --breakdown  # and per vLLM release / family

The cases are tests/fixtures/capacity/vllm_logs.yaml (URLs, conditions, printed figures). For
each case pdctl predicts from the conditions alone; the error is against the printed KV
tokens, or the printed "Available KV cache memory" where the log has no token line (tokens
are that memory over the bytes per token, so the two errors agree to rounding). Cases where
vLLM refused to start count for the fit verdict only. Pure computation: no GPU, no network, no
timing.
"""

from __future__ import annotations

import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.capacity.h200_logs import H200_LOGS  # noqa: E402
from tests.capacity.vllm_logs import LOGS, Log, kv_error, predict, token_error  # noqa: E402


@dataclass(frozen=True)
class Row:
    log: Log
    error: float | None  # capacity error, per cent (None: refused or nothing printed)
    kv_error: float | None
    token_error: float | None
    fit_right: bool
    predicted_fits: bool
    predicted_tokens: int
    predicted_kv: float


def rows() -> list[Row]:
    out = []
    for log in LOGS + H200_LOGS:
        if not log.e2e:
            continue
        p = predict(log)
        tok, kv = token_error(log, p), kv_error(log, p)
        error = (tok if tok is not None else kv) if log.fits else None
        out.append(Row(log, error, kv, tok, p.fits == log.fits, p.fits, p.tokens, p.kv_gib))
    return out


def distribution(errors: list[float]) -> str:
    if not errors:
        return "no cases"
    a = sorted(abs(e) for e in errors)
    p90 = a[min(len(a) - 1, int(round(0.9 * (len(a) - 1))))]
    within5 = sum(1 for e in a if e <= 5)
    within15 = sum(1 for e in a if e <= 15)
    return (
        f"{len(a)} cases: median |error| {statistics.median(a):.1f}%, p90 {p90:.1f}%, "
        f"worst {a[-1]:.1f}%; within ±5%: {within5}/{len(a)}, within ±15%: "
        f"{within15}/{len(a)}"
    )


def summary(all_rows: list[Row]) -> list[str]:
    lines = []
    groups = (
        ("V1 (0.8+), public logs, tuned on", lambda r: r.log.v1 and r.log.split == "tune"),
        ("V1 (0.8+), public logs, held out", lambda r: r.log.v1 and r.log.split == "holdout"),
        (
            "V1 (0.8+), held out when first evaluated (with cases since used for source fixes)",
            lambda r: r.log.v1 and (r.log.split == "holdout" or "srcfix" in r.log.tags),
        ),
        ("V1 (0.8+), third pass, held out", lambda r: r.log.v1 and "pass3" in r.log.tags),
        ("V1 (0.8+), fourth pass, held out", lambda r: r.log.v1 and "pass4" in r.log.tags),
        ("V1 (0.8+), all", lambda r: r.log.v1),
        ("vLLM 0.23.0 on our H200, fit split", lambda r: r.log.split == "h200-fit"),
        ("vLLM 0.23.0 on our H200, held out", lambda r: r.log.split == "h200-holdout"),
        ("V0 (before 0.8), reported only", lambda r: not r.log.v1),
    )
    for label, keep in groups:
        chosen = [r for r in all_rows if keep(r)]
        errors = [r.error for r in chosen if r.error is not None]
        verdicts = sum(1 for r in chosen if r.fit_right)
        lines.append(
            f"- {label}: {distribution(errors)}; fit verdict right {verdicts}/{len(chosen)}"
        )
    return lines


def family(log: Log) -> str:
    """The model family a case counts under: MLA, sliding-window/hybrid, multimodal, MoE,
    else dense (the first that applies)."""
    kind = log.kind.lower()
    for word, name in (
        ("mla", "MLA"),
        ("sliding", "sliding-window / hybrid"),
        ("multimodal", "multimodal"),
        ("moe", "MoE"),
    ):
        if word in kind:
            return name
    return "dense"


def release(log: Log) -> str:
    """The vLLM minor release of a case ("0.23"), V0 cases as "V0 (0.6-0.7)"."""
    if not log.v1:
        return "V0 (0.6-0.7)"
    return ".".join(log.version.split(".")[:2])


def breakdown(all_rows: list[Row], key: object, title: str) -> list[str]:
    """The error distribution per value of `key` (V1 cases that started)."""
    out = [
        f"| {title} | cases | within ±5% | within ±15% | median \\|error\\| | worst | verdicts |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    groups: dict[str, list[Row]] = {}
    for r in all_rows:
        groups.setdefault(key(r.log), []).append(r)  # type: ignore[operator]

    def order(name: str) -> tuple[int, ...]:
        digits = [int(x) for x in name.split(".") if x.isdigit()]
        return tuple(digits) if len(digits) == 2 else (-1,)

    for name in sorted(groups, key=lambda n: (order(n), n)):
        chosen = groups[name]
        errors = sorted(abs(r.error) for r in chosen if r.error is not None)
        right = sum(1 for r in chosen if r.fit_right)
        if errors:
            out.append(
                f"| {name} | {len(errors)} | {sum(e <= 5 for e in errors)} | "
                f"{sum(e <= 15 for e in errors)} | {statistics.median(errors):.1f}% | "
                f"{errors[-1]:.1f}% | {right}/{len(chosen)} |"
            )
        else:
            out.append(f"| {name} | 0 | - | - | - | - | {right}/{len(chosen)} |")
    return out


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def table(all_rows: list[Row]) -> list[str]:
    out = [
        "| case | vLLM | GPU | TP×PP | util | len | split | KV GiB pred/obs | tokens "
        "pred/obs | error | fit pred/obs |",
        "|---|---|---|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for r in all_rows:
        log = r.log
        kv = "-" if log.kv_gib is None else f"{log.kv_gib:.2f}"
        tokens = "-" if log.tokens is None else f"{log.tokens:,}"

        def word(fits: bool) -> str:
            return "fits" if fits else "refused"

        out.append(
            f"| [{log.name}]({log.url}) | {log.version} | {log.gpu} | {log.tp}×{log.pp} | "
            f"{log.util:g} | {log.max_model_len or '-'} | {log.split} | "
            f"{r.predicted_kv:.2f} / {kv} | {r.predicted_tokens:,} / {tokens} | "
            f"{_pct(r.error)} | {word(r.predicted_fits)} / {word(log.fits)}"
            f"{'' if r.fit_right else ' ✗'} |"
        )
    return out


def main(argv: list[str]) -> int:
    all_rows = rows()
    if "--summary" not in argv:
        print("\n".join(table(all_rows)))
        print()
    print("\n".join(summary(all_rows)))
    if "--breakdown" in argv or "--summary" not in argv:
        print()
        print("\n".join(breakdown(all_rows, release, "vLLM")))
        print()
        print("\n".join(breakdown(all_rows, family, "family")))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
