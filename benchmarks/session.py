"""Issue 17, one SSH session per host per operation, measured on real sshd hosts.

  bashrc   `pdctl preflight` of 8 hosts whose ~/.bashrc sleeps 0.3 s (what a conda or pyenv
           init costs) vs 1 such host; target <= 1.3.
  pyenv    the same with this machine's ~/.bashrc (`pyenv init`: CPU, not sleep); <= 1.3.
  fleet32  `pdctl up` and `pdctl preflight` of 32 hosts vs 1 host; target <= 1.5. Also,
           for scale (no pdctl, no SSH): 32 stand-in engines started at once on this
           machine until all listen, vs 1 (the floor under `up`'s ratio on shared CPUs).

The hosts are sshd daemons in network namespaces of their own (benchmarks/fleet.py), made and
removed by this script (needs root); the engine is the tests' stand-in (fake_vllm.py). Every
ratio compares runs interleaved round by round (medians). Usage:

    python benchmarks/session.py [--rounds 3] [--only bashrc,pyenv,fleet32] [--checkout DIR]

--checkout DIR runs the pdctl of another source tree (`PYTHONPATH=DIR python -m pdctl`), e.g.
`git archive <commit> | tar -x -C DIR`, for before/after figures. Prints markdown rows.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import fleet as fl
import timing
import yaml

SLEEPY = "sleep 0.3\n"  # a ~/.bashrc as slow as a conda init
SECTIONS = ["bashrc", "pyenv", "fleet32"]


def _specs(fleet: fl.Fleet, sizes: tuple[int, ...], venv: Path, root: Path) -> dict[int, Path]:
    out = {}
    for n in sizes:
        path = root / f"session-{n}.yaml"
        path.write_text(yaml.safe_dump(fl.fleet_spec(fleet, n, venv, root / "data")))
        out[n] = path
    return out


def _rounds(
    cmds: dict[int, list[str]],
    rounds: int,
    env: dict,
    fleet: fl.Fleet,
    between=None,
    ok: tuple[int, ...] = (0, 1),
) -> dict[int, list[fl.Sample]]:
    """Each command once per round, in alternating order; round 0 warms up (not kept)."""
    got: dict[int, list[fl.Sample]] = {n: [] for n in cmds}
    sizes = sorted(cmds)
    for r in range(rounds + 1):
        for n in sizes if r % 2 == 0 else sizes[::-1]:
            if between:
                between(n)
            sample = fl._timed(cmds[n], env, fleet, ok=ok)
            if r:
                got[n].append(sample)
    if between:
        for n in sizes:
            between(n)
    return got


def measure(pdctl: list[str], env: dict, rounds: int, only: list[str], tmp: Path) -> list[dict]:
    rows: list[dict] = []
    venv = fl.stand_in_venv(tmp)
    if "bashrc" in only:
        with fl.Fleet(tmp / "sleepy", 8, bashrc=SLEEPY) as fleet:
            specs = _specs(fleet, (1, 8), venv, tmp)
            kh = ["--known-hosts", str(fleet.known_hosts)]
            cmds = {n: [*pdctl, "preflight", str(specs[n]), "-o", "json", *kh] for n in specs}
            got = _rounds(cmds, rounds, env, fleet)
            rows.append(
                _row("bashrc", "`pdctl preflight`, hosts whose ~/.bashrc sleeps 0.3 s", got, 8, 1.3)
            )
    if "pyenv" in only:  # this machine's own ~/.bashrc: `pyenv init`, CPU-bound
        with fl.Fleet(tmp / "pyenv", 8, plain_shell=False) as fleet:
            specs = _specs(fleet, (1, 8), venv, tmp)
            kh = ["--known-hosts", str(fleet.known_hosts)]
            cmds = {n: [*pdctl, "preflight", str(specs[n]), "-o", "json", *kh] for n in specs}
            got = _rounds(cmds, rounds, env, fleet)
            label = "`pdctl preflight`, hosts whose ~/.bashrc runs `pyenv init` (this machine's)"
            rows.append(_row("pyenv", label, got, 8, 1.3))
    if "fleet32" in only:
        with fl.Fleet(tmp / "wide", 32) as fleet:
            specs = _specs(fleet, (1, 32), venv, tmp)
            kh = ["--known-hosts", str(fleet.known_hosts), "--parallel", "32"]

            def down(n: int) -> None:
                fl._timed([*pdctl, "down", str(specs[n]), *kh], env, fleet, ok=(0, 1))

            up = {n: [*pdctl, "up", str(specs[n]), "--yes", "--timeout", "300", *kh] for n in specs}
            try:
                got = _rounds(up, rounds, env, fleet, between=down, ok=(0,))
            finally:
                left = fl.stop_leftovers(tmp / "data")
            rows.append(_row("up32", "`pdctl up --parallel 32`", got, 32, 1.5))
            if left:
                rows[-1]["note"] = f"stopped {len(left)} engines `pdctl down` left"
            cmds = {n: [*pdctl, "preflight", str(specs[n]), "-o", "json", *kh] for n in specs}
            got = _rounds(cmds, rounds, env, fleet)
            rows.append(_row("preflight32", "`pdctl preflight --parallel 32`", got, 32, 1.5))
        rows.append(engines_alone(venv, rounds))
    return rows


def engines_alone(venv: Path, rounds: int) -> dict:
    """The stand-in engines alone: N started at once on this machine (no SSH, no pdctl) until
    every one accepts connections, 32 vs 1, interleaved; round 0 warms up."""
    walls: dict[int, list[float]] = {1: [], 32: []}
    for r in range(rounds + 1):
        for n in (1, 32) if r % 2 == 0 else (32, 1):
            ports = []
            for _ in range(n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", 0))
                    ports.append(s.getsockname()[1])
            begun = time.monotonic()
            procs = [
                subprocess.Popen(
                    [str(venv / "bin" / "vllm"), "serve", "stand-in", "--port", str(port)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for port in ports
            ]
            try:
                waiting = set(ports)
                while waiting:
                    for port in list(waiting):
                        try:
                            socket.create_connection(("127.0.0.1", port), 1).close()
                            waiting.discard(port)
                        except OSError:
                            pass
                    time.sleep(0.01)
                if r:
                    walls[n].append(time.monotonic() - begun)
            finally:
                for proc in procs:
                    proc.kill()
                    proc.wait()
    got = {n: [fl.Sample(w, 0.0, 0.0) for w in ws] for n, ws in walls.items()}
    label = "32 stand-in engines started at once until all listen (no SSH, no pdctl)"
    row = _row("engines32", label, got, 32, 0.0)
    row["what"] = label + ", vs 1 engine (wall time)"
    row["report"] = True
    return row


def _row(key: str, label: str, got: dict[int, list[fl.Sample]], many: int, target: float) -> dict:
    med = {n: statistics.median(s.wall for s in samples) for n, samples in got.items()}
    cpu = {n: statistics.median(s.server_cpu for s in samples) for n, samples in got.items()}
    ratio = med[many] / med[1]
    return {
        "key": key,
        "what": f"{label}, {many} SSH hosts vs 1 host (wall time)",
        "many": med[many],
        "one": med[1],
        "ratio": ratio,
        "target": target,
        "server_cpu": cpu,
        "runs": {n: [round(s.wall, 2) for s in samples] for n, samples in got.items()},
    }


def markdown(rows: list[dict], label: str) -> str:
    lines = []
    for r in rows:
        verdict = "pass" if r["ratio"] <= r["target"] else "**FAIL**"
        target = f"<= {r['target']}"
        if r.get("report"):
            verdict, target = "-", "report"
        lines.append(
            f"| {r['key']} ({label}) | {r['what']} | {timing.ms(r['many'])} | "
            f"{timing.ms(r['one'])} | {r['ratio']:.2f} | {target} | {verdict} |"
        )
    for r in rows:
        cpu = ", ".join(f"{n} hosts {timing.ms(v)}" for n, v in sorted(r["server_cpu"].items()))
        runs = "; ".join(f"{n} hosts {v}" for n, v in sorted(r["runs"].items()))
        lines.append(f"<!-- {r['key']} ({label}): sshd-side CPU {cpu}; runs (s): {runs} -->")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default=",".join(SECTIONS))
    ap.add_argument("--checkout", type=Path, help="run the pdctl of this source tree")
    ap.add_argument("--label", default="after")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root (network namespaces for the SSH hosts)")
    env = dict(os.environ, COLUMNS="200")
    if args.checkout:
        env["PYTHONPATH"] = str(args.checkout.resolve())
    pdctl = [sys.executable, "-m", "pdctl"]
    tmp = Path(tempfile.mkdtemp(prefix="pdctl-session-"))
    try:
        load = os.getloadavg()[0]
        rows = measure(pdctl, env, args.rounds, args.only.split(","), tmp)
        print(markdown(rows, args.label))
        print(f"<!-- load average {load:.2f} at start, {os.getloadavg()[0]:.2f} at the end -->")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
