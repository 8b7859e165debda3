"""Wall-clock timing of commands, interleaved so that noise hits every command alike.

Machines here are shared and noisy: absolute times drift from minute to minute. Each round
runs every command once (in rotating order), so a ratio of medians compares runs made side
by side. Only public tools: subprocess, time.perf_counter, os.wait4.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Argv = Sequence[str]


@dataclass(frozen=True)
class Stats:
    """Seconds per run of one command."""

    runs: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def best(self) -> float:
        return min(self.runs)

    @property
    def spread(self) -> float:
        """Interquartile range, seconds (0 with fewer than 4 runs)."""
        if len(self.runs) < 4:
            return 0.0
        q = statistics.quantiles(self.runs, n=4)
        return q[2] - q[0]


def run_once(
    argv: Argv, env: Mapping[str, str] | None = None, ok: Sequence[int] = (0,)
) -> float:
    """Seconds to run argv to completion (output discarded); fails loudly on an exit status
    not in `ok`."""
    start = time.perf_counter()
    proc = subprocess.run(list(argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    elapsed = time.perf_counter() - start
    if proc.returncode not in ok:
        raise RuntimeError(
            f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr.decode(errors='replace')}"
        )
    return elapsed


def interleaved(
    commands: Mapping[str, Argv],
    rounds: int,
    warmup: int = 2,
    env: Mapping[str, str] | None = None,
) -> dict[str, Stats]:
    """Run every command `rounds` times, one of each per round, rotating the order."""
    labels = list(commands)
    for _ in range(warmup):
        for label in labels:
            run_once(commands[label], env)
    runs: dict[str, list[float]] = {label: [] for label in labels}
    for r in range(rounds):
        k = r % len(labels)
        for label in labels[k:] + labels[:k]:
            runs[label].append(run_once(commands[label], env))
    return {label: Stats(tuple(ts)) for label, ts in runs.items()}


def run_usage(
    argv: Argv, env: Mapping[str, str] | None = None, ok: Sequence[int] = (0,)
) -> tuple[float, os.struct_rusage]:
    """Wall seconds and the kernel's resource usage (CPU, peak RSS) of one run of argv."""
    with tempfile.TemporaryFile() as err, open(os.devnull, "wb") as null:
        start = time.perf_counter()
        proc = subprocess.Popen(list(argv), stdout=null, stderr=err, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode not in ok:
            err.seek(0)
            text = err.read().decode(errors="replace")[-3000:]
            raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: {text}")
    return wall, usage


def max_rss_kib(argv: Argv, env: Mapping[str, str] | None = None) -> int:
    """Peak resident memory (KiB) of one run of argv, from the kernel's rusage of that child."""
    return int(run_usage(argv, env)[1].ru_maxrss)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.2f} s"
