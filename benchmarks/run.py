"""pdctl benchmarks: `nox -s bench` or `python benchmarks/run.py [--rounds N] [--only ...]`.

Every figure is a ratio of two commands measured side by side in the same run (interleaved
rounds, medians), because absolute times drift on shared machines. Writes the markdown table
to benchmarks/RESULTS.md (or --output) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import specs
import timing

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SCALE = (1, 10, 100, 1000)
SECTIONS = ("render", "help", "scale", "memory", "fleet", "session")


@dataclass
class Row:
    """One line of the summary table."""

    key: str
    what: str
    pdctl: str
    reference: str
    ratio: str
    target: str
    ok: bool | None  # None: not measured

    def markdown(self) -> str:
        verdict = {True: "pass", False: "**FAIL**", None: "not measured"}[self.ok]
        cells = (self.key, self.what, self.pdctl, self.reference, self.ratio, self.target, verdict)
        return "| " + " | ".join(cells) + " |"


@dataclass
class Report:
    rows: list[Row]
    sections: list[str]  # extra markdown (curves, details)
    notes: list[str]


def pdctl_exe() -> str:
    """The pdctl of the interpreter running this script (the same environment)."""
    beside = Path(sys.executable).parent / "pdctl"
    if beside.exists():
        return str(beside)
    found = shutil.which("pdctl")
    if not found:
        sys.exit("pdctl is not installed in this environment: pip install -e .")
    return found


def render_vs_kustomize(pdctl: str, rounds: int, tmp: Path, report: Report) -> None:
    spec = ROOT / "examples" / "phase1-k8s.yaml"
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        report.rows.append(
            Row(
                "1",
                "cold `pdctl render` phase 1 example vs `kubectl kustomize`",
                "-",
                "-",
                "-",
                "<= 2.0",
                None,
            )
        )
        report.notes.append("1: not measured: kubectl is not on PATH.")
        return
    stream = subprocess.run(
        [pdctl, "render", str(spec)], check=True, capture_output=True, text=True
    ).stdout
    folder = specs.write_kustomization(stream, tmp / "kustomize")
    built = subprocess.run(
        [kubectl, "kustomize", str(folder)], check=True, capture_output=True, text=True
    ).stdout
    same = _objects(built) == _objects(stream)
    floor = [sys.executable, "-c", "import typer._adapters, yaml"]
    stats = timing.interleaved(
        {
            "pdctl": [pdctl, "render", str(spec)],
            "validate": [pdctl, "validate", str(spec)],
            "plan": [pdctl, "plan", str(spec)],
            "floor": floor,
            "kustomize": [kubectl, "kustomize", str(folder)],
        },
        rounds,
    )
    ref = stats["kustomize"].median
    for key, name, what, target in (
        ("1", "pdctl", "cold `pdctl render examples/phase1-k8s.yaml`", 2.0),
        ("1b", "validate", "cold `pdctl validate` of the same spec", 1.8),
        ("1c", "plan", "cold `pdctl plan` of the same spec", 2.5),
    ):
        ratio = stats[name].median / ref
        report.rows.append(
            Row(
                key,
                f"{what} vs `kubectl kustomize` (same objects, plain files)",
                _fig(stats[name]),
                _fig(stats["kustomize"]),
                f"{ratio:.2f}",
                f"<= {target}",
                ratio <= target,
            )
        )
    ratio = stats["floor"].median / ref
    report.rows.append(
        Row(
            "1d",
            "`python -c 'import typer._adapters, yaml'` (what any typer command with "
            "parameters loads) vs `kubectl kustomize`",
            _fig(stats["floor"]),
            _fig(stats["kustomize"]),
            f"{ratio:.2f}",
            "report",
            True,
        )
    )
    if not same:
        report.notes.append("1: kubectl kustomize built objects that differ from pdctl's.")
    report.sections.append(breakdown(spec, rounds))


def breakdown(spec: Path, rounds: int) -> str:
    """Each stage's best time over fresh processes (benchmarks/breakdown.py)."""
    best: dict[str, float] = {}
    start = min(timing.run_once([sys.executable, "-c", "pass"]) for _ in range(rounds))
    for _ in range(rounds):
        out = subprocess.run(
            [sys.executable, str(HERE / "breakdown.py"), str(spec)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        for stage, seconds in json.loads(out).items():
            best[stage] = min(best.get(stage, seconds), seconds)
    lines = [
        "### Where a cold `pdctl render` of the phase 1 example goes (best of "
        f"{rounds} fresh processes per stage)",
        "",
        "| stage | time |",
        "|---|---:|",
        f"| interpreter start (`python -c pass`) | {start * 1000:.1f} ms |",
    ]
    lines += [f"| {stage} | {seconds * 1000:.1f} ms |" for stage, seconds in best.items()]
    total = start + sum(best.values())
    lines.append(f"| **sum** | **{total * 1000:.1f} ms** |")
    return "\n".join(lines)


def _objects(stream: str) -> list:
    import yaml

    docs = [d for d in yaml.safe_load_all(stream) if d]
    return sorted(docs, key=lambda d: (d["kind"], d["metadata"]["name"]))


def help_vs_python(pdctl: str, rounds: int, report: Report) -> None:
    stats = timing.interleaved(
        {"pdctl": [pdctl, "--help"], "python": [sys.executable, "-c", "pass"]}, rounds
    )
    ratio = stats["pdctl"].median / stats["python"].median
    report.rows.append(
        Row(
            "2",
            "`pdctl --help` vs `python -c pass` (same environment)",
            _fig(stats["pdctl"]),
            _fig(stats["python"]),
            f"{ratio:.2f}",
            "<= 4",
            ratio <= 4,
        )
    )


def scale(pdctl: str, rounds: int, tmp: Path, report: Report) -> None:
    paths = {
        n: specs.write_spec(specs.scale_spec(n, "mixed"), tmp / f"scale-{n}.yaml") for n in SCALE
    }
    stats = timing.interleaved(
        {str(n): [pdctl, "render", str(p)] for n, p in paths.items()}, rounds
    )
    inproc = {n: _inproc(p) for n, p in paths.items()}
    one = stats["1"].median
    lines = [
        "### Render scale (phase 0, single-GPU serve replicas, 8 per host, conda/docker/venv "
        "hosts in turn)",
        "",
        "| instances | hosts | files | output | `pdctl render` (cold process) | ratio to 1 | "
        "in-process load + plan + render | per instance |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in SCALE:
        s, ip = stats[str(n)], inproc[n]
        lines.append(
            f"| {n} | {-(-n // specs.GPUS_PER_HOST)} | {ip['artifacts']} | "
            f"{ip['bytes'] / 1024:.0f} KiB | {_fig(s)} | {s.median / one:.2f} | "
            f"{ip['total'] * 1000:.1f} ms (load {ip['load'] * 1000:.1f}, plan "
            f"{ip['plan'] * 1000:.1f}, render {ip['render'] * 1000:.1f}) | "
            f"{ip['total'] / n * 1e6:.0f} µs |"
        )
    report.sections.append("\n".join(lines))
    big = stats[str(SCALE[-1])].median
    ratio = big / one
    report.rows.append(
        Row(
            "3",
            f"`pdctl render`, {SCALE[-1]} instances vs 1 instance (cold process)",
            _fig(stats[str(SCALE[-1])]),
            _fig(stats["1"]),
            f"{ratio:.2f}",
            "<= 10, and <= 1 s",
            ratio <= 10 and big <= 1.0,
        )
    )


def _inproc(path: Path) -> dict:
    out = subprocess.run(
        [sys.executable, str(HERE / "inproc.py"), str(path)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def memory(pdctl: str, tmp: Path, report: Report) -> None:
    big = specs.write_spec(specs.scale_spec(SCALE[-1], "mixed"), tmp / "memory-big.yaml")
    one = specs.write_spec(specs.scale_spec(1, "mixed"), tmp / "memory-one.yaml")
    # Peak RSS barely varies between runs: the highest of three is reported.
    rss_big = max(timing.max_rss_kib([pdctl, "render", str(big)]) for _ in range(3))
    rss_one = max(timing.max_rss_kib([pdctl, "render", str(one)]) for _ in range(3))
    rss_py = max(timing.max_rss_kib([sys.executable, "-c", "pass"]) for _ in range(3))
    report.rows.append(
        Row(
            "5",
            f"peak memory (max RSS) of `pdctl render`, {SCALE[-1]} instances vs 1 instance",
            f"{rss_big / 1024:.1f} MiB",
            f"{rss_one / 1024:.1f} MiB",
            f"{rss_big / rss_one:.2f}",
            "report",
            True,
        )
    )
    report.notes.append(
        f"5: for scale, `python -c pass` peaks at {rss_py / 1024:.1f} MiB here; the "
        f"{SCALE[-1]}-instance render writes "
        f"{_inproc(big)['bytes'] / 1024 / 1024:.1f} MiB of scripts to stdout."
    )


def fleet(pdctl: str, rounds: int, tmp: Path, report: Report) -> None:
    import statistics

    import fleet as fleet_bench

    result = fleet_bench.measure(pdctl, rounds, tmp)
    one, many = fleet_bench.SIZES
    rows = (
        ("4a", "up", "`pdctl up`", "<= 1.5"),
        ("4b", "preflight", "`pdctl preflight`", "<= 1.5"),
        (
            "4c",
            "preflight+bashrc",
            "`pdctl preflight`, hosts whose ~/.bashrc runs `pyenv init`",
            "report",
        ),
    )
    for key, cmd, label, target in rows:
        what = f"{label}, {many} SSH hosts vs 1 host (wall time)"
        stats = result.stats(cmd)
        if len(stats) < 2:
            why = result.missing.get(cmd) or result.missing.get(cmd.split("+")[0], "no result")
            report.rows.append(Row(key, what, "-", "-", "-", target, None))
            report.notes.append(f"{key}: not measured: {why}.")
            continue
        ratio = stats[many].median / stats[one].median
        ok = ratio <= 1.5 if target != "report" else True
        report.rows.append(
            Row(key, what, _fig(stats[many]), _fig(stats[one]), f"{ratio:.2f}", target, ok)
        )
    if result.runs:
        lines = [
            "### Fleet: where the time goes (medians per run)",
            "",
            "Hosts: real sshd daemons, each in a network namespace of its own, all on this "
            f"machine's {os.cpu_count()} CPUs; engine: tests/targets/fake_vllm.py. "
            "pdctl CPU: the pdctl process; sshd-side CPU: every SSH session's shell and "
            "commands on the hosts.",
            "",
            "| command | hosts | wall | pdctl CPU | sshd-side CPU |",
            "|---|---:|---:|---:|---:|",
        ]
        for (cmd, n), samples in sorted(result.runs.items()):
            med = {
                k: statistics.median(getattr(x, k) for x in samples)
                for k in ("wall", "client_cpu", "server_cpu")
            }
            lines.append(
                f"| {cmd} | {n} | {timing.ms(med['wall'])} | "
                f"{timing.ms(med['client_cpu'])} | {timing.ms(med['server_cpu'])} |"
            )
        report.sections.append("\n".join(lines))
    report.notes.extend(result.notes)


def session(pdctl: str, rounds: int, tmp: Path, report: Report) -> None:
    """Issue 17's rows (benchmarks/session.py): one SSH session per host per operation."""
    import session as bench

    rows = (
        ("6a", "bashrc", None),
        ("6b", "pyenv", "report"),
        ("6c", "up32", None),
        ("6d", "preflight32", None),
        ("6e", "engines32", "report"),
    )
    if os.geteuid() != 0:
        for key, _, _ in rows:
            report.rows.append(Row(key, f"session: {key}", "-", "-", "-", "-", None))
        report.notes.append("6: not measured: needs root (network namespaces for the hosts).")
        return
    env = dict(os.environ, COLUMNS="200")
    load = os.getloadavg()[0]
    got = {r["key"]: r for r in bench.measure([pdctl], env, rounds, bench.SECTIONS, tmp)}
    for key, name, target in rows:
        r = got[name]
        ok = True if target else r["ratio"] <= r["target"]
        report.rows.append(
            Row(
                key,
                r["what"],
                timing.ms(r["many"]),
                timing.ms(r["one"]),
                f"{r['ratio']:.2f}",
                target or f"<= {r['target']}",
                ok,
            )
        )
    report.notes.append(
        f"6: `python benchmarks/session.py` (load average {load:.1f} at its start); 6b: "
        "CPU-bound shells of 8 hosts share this machine's CPUs, so it is reported only; 6e: "
        "the stand-in engines alone (no SSH, no pdctl), the part of 6c's 32-host time that "
        "starting 32 engine processes on the same CPUs costs whatever pdctl does."
    )


def _fig(stats: timing.Stats) -> str:
    return f"{timing.ms(stats.median)} (IQR {timing.ms(stats.spread)})"


def machine() -> str:
    load = os.getloadavg()
    kubectl = shutil.which("kubectl")
    kver = ""
    if kubectl:
        out = subprocess.run([kubectl, "version", "--client"], capture_output=True, text=True)
        kver = out.stdout.splitlines()[0] if out.stdout else ""
    return (
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {os.cpu_count()} CPUs; "
        f"Python {platform.python_version()} ({sys.executable}); {kver}; load average "
        f"{load[0]:.2f} at start"
    )


def markdown(report: Report, rounds: int, started: str) -> str:
    head = [
        "# pdctl benchmarks",
        "",
        "Written by `python benchmarks/run.py` (`nox -s bench`); see docs/performance.md. "
        "Every ratio compares two commands measured in the same run, interleaved round by "
        f"round ({rounds} rounds each, medians; IQR = interquartile range).",
        "",
        f"Machine: {started}.",
        "",
        "| # | measurement | pdctl | reference | ratio | target | verdict |",
        "|---|---|---:|---:|---:|---|---|",
    ]
    body = [r.markdown() for r in sorted(report.rows, key=lambda r: r.key)]
    tail: list[str] = []
    for section in report.sections:
        tail += ["", section]
    if report.notes:
        tail += ["", "Notes:", ""] + [f"- {n}" for n in report.notes]
    return "\n".join(head + body + tail) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=20, help="interleaved rounds per comparison")
    ap.add_argument(
        "--only",
        default=",".join(SECTIONS),
        help="comma-separated sections: " + ", ".join(SECTIONS),
    )
    ap.add_argument("--output", type=Path, default=HERE / "RESULTS.md")
    args = ap.parse_args()
    only = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(only) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections: {', '.join(sorted(unknown))}")
    pdctl = pdctl_exe()
    started = machine()
    report = Report([], [], [])
    tmp = Path(tempfile.mkdtemp(prefix="pdctl-bench-"))
    try:
        for name in only:
            print(f"[bench] {name} ...", file=sys.stderr, flush=True)
            if name == "render":
                render_vs_kustomize(pdctl, args.rounds, tmp, report)
            elif name == "help":
                help_vs_python(pdctl, args.rounds, report)
            elif name == "scale":
                scale(pdctl, max(5, args.rounds // 2), tmp, report)
            elif name == "memory":
                memory(pdctl, tmp, report)
            elif name == "fleet":
                fleet(pdctl, max(3, args.rounds // 4), tmp, report)
            elif name == "session":
                session(pdctl, max(3, args.rounds // 4), tmp / "session", report)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    text = markdown(report, args.rounds, started)
    args.output.write_text(text, encoding="utf-8")
    print(text)
    failed = [r.key for r in report.rows if r.ok is False]
    if failed:
        print(f"[bench] targets missed: {', '.join(failed)}", file=sys.stderr)


if __name__ == "__main__":
    main()
