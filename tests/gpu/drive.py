"""Drive pdctl on a GPU host as a user would, and record what it sees.

Runs ON a Linux host with an NVIDIA GPU, a vLLM install reachable as a venv (its bin/vllm), and
an sshd that lets this user in with KEY (tests/gpu/h200.sh sets all of that up on the H200 test
machine). Every scenario writes under OUT/<scenario>/: the spec, pdctl's output of each command,
the engines' logs and /metrics, nvidia-smi, and `results.json` with the figures the CPU suite
replays (tests/gpu/test_replay.py).

usage: python3 drive.py SCENARIO OUT [options]   (SCENARIO: phase0, phase2, phase3, startups,
bench, speed, sweep)
The environment names the machine: PDCTL_GPU_VENV (the venv holding vLLM and vllm-router),
PDCTL_GPU_MODELS (folder of model folders with config.json and a tokenizer), PDCTL_GPU_KEY
(SSH key), PDCTL_GPU_KNOWN_HOSTS, PDCTL_GPU_HOSTS ("127.0.0.1:2222,127.0.0.2:2222": two
addresses of this one machine, so that prefill and decode can be two "hosts" sharing its GPU).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import yaml

VENV = os.environ.get("PDCTL_GPU_VENV", "/opt/torch/.venv")
MODELS = Path(os.environ.get("PDCTL_GPU_MODELS", "/root/models"))
KEY = os.environ.get("PDCTL_GPU_KEY", "/root/.ssh/pdctl_gpu")
KNOWN = os.environ.get("PDCTL_GPU_KNOWN_HOSTS", "/root/.ssh/pdctl_gpu_known_hosts")
HOSTS = os.environ.get("PDCTL_GPU_HOSTS", "127.0.0.1:2222,127.0.0.2:2222").split(",")
DATA = Path(os.environ.get("PDCTL_GPU_DATA", "/tmp/pdctl-gpu"))
ENGINE_ENV = {
    "VLLM_USE_FLASHINFER_SAMPLER": "0",  # 0.23.0's sampler imports flashinfer otherwise
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}
# The Mooncake scenario logs vLLM's MooncakeConnector at DEBUG and the rest of vLLM at INFO
# (VLLM_LOGGING_CONFIG_PATH replaces vLLM's logging config: vllm/logger.py, 0.23.0): the
# connector's debug lines (each request's update_state_after_alloc and request_finished, each
# pull sent and finished, the bootstrap query) say where a stalled burst's transfers stopped,
# which its INFO lines do not until the 480 s timeout (tests/fixtures/gpu/vllm023-h100-e).
CONNECTOR_LOGGER = "vllm.distributed.kv_transfer.kv_connector.v1.mooncake"


def connector_debug_logging() -> dict:
    """A dictConfig document: one stdout handler for the `vllm` logger at INFO, and the Mooncake
    connector's loggers at DEBUG through it."""
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"plain": {
            # vLLM's own shape (its lines carry `(EngineCore_DP0 pid=N)` before it), which
            # pdctl's log readers match (targets/crashline.py VLLM_ERROR, stages.py PREFIX)
            "format": "%(levelname)s %(asctime)s.%(msecs)03d [%(filename)s:%(lineno)d] "
                      "%(message)s",
            "datefmt": "%m-%d %H:%M:%S",
        }},
        "handlers": {"stdout": {"class": "logging.StreamHandler", "formatter": "plain",
                                "level": "DEBUG", "stream": "ext://sys.stdout"}},
        "loggers": {"vllm": {"handlers": ["stdout"], "level": "INFO", "propagate": False},
                    CONNECTOR_LOGGER: {"level": "DEBUG"}},
    }


KV_LINES = (
    r"Available KV cache memory: .*",
    r"GPU KV cache size: .*",
    r"Maximum concurrency for .*",
    r"Model loading took .*",
    r"Graph capturing finished .*",
    r"init engine .* took .*",
    r"[Mm]emory profiling takes .*",
    r"CUDA graph .*",
    r"Estimated CUDA graph memory.*",
)


def log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", flush=True)


def pdctl(out: Path, name: str, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run `python -m pdctl ARGS` as a user would; keep its output in OUT/NAME.txt."""
    cmd = [sys.executable, "-m", "pdctl", *args]
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as exc:  # what it printed so far is kept
        said = [x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
                for x in (exc.stdout, exc.stderr)]
        res = subprocess.CompletedProcess(cmd, 124, said[0], f"{said[1]}timed out: {exc}")
    text = f"$ pdctl {' '.join(args)}\n{res.stdout}{res.stderr}exit {res.returncode}\n"
    (out / f"{name}.txt").write_text(text)
    log(f"pdctl {args[0]}: exit {res.returncode}")
    return res


def host(i: int, name: str, gpus: list[int]) -> dict:
    address, port = HOSTS[i].split(":")
    return {
        "name": name,
        "address": address,
        "port": int(port),
        "user": "root",
        "identityFile": KEY,
        "gpus": gpus,
        "runtime": "venv",
        "venv": VENV,
        "dataDir": str(DATA / name),
    }


def model(name: str, max_len: int = 4096, **extra: object) -> dict:
    folder = MODELS / name
    return {
        "name": str(folder),
        "servedName": name,
        "maxModelLen": max_len,
        "config": str(folder / "config.json"),
        **extra,
    }


def header(name: str, phase: int) -> dict:
    """What every scenario's spec starts with: Qwen3-8B on vLLM 0.23.0 on an H200."""
    return {
        "name": name,
        "phase": phase,
        "model": model("qwen3-8b"),
        "engine": {"version": "0.23.0", "env": ENGINE_ENV},
        "hardware": {"gpu": "H200"},
    }


def get(url: str, timeout: float = 30) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return resp.read().decode()


def complete(base: str, name: str, prompt: str, max_tokens: int, api_key: str | None = None,
             timeout: float = 300) -> dict:
    body = {"model": name, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    req = urllib.request.Request(f"{base}/completions", data=json.dumps(body).encode(),
                                 headers=headers)
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


def prompt_of(n_words: int, seed: int) -> str:
    """A prompt the word-level tokenizer of tests/gpu/tokenizer.py reads as n_words tokens."""
    return " ".join(f"t{(seed * 7919 + i * 104729) % 30000 + 1000}" for i in range(n_words))


def wait_healthy(port: int, deadline_s: float, pid_file: Path | None = None) -> bool:
    end = time.time() + deadline_s
    while time.time() < end:
        try:
            get(f"http://127.0.0.1:{port}/health", timeout=5)
            return True
        except (urllib.error.URLError, OSError):
            pass
        if pid_file is not None and pid_file.exists():
            pid = pid_file.read_text().strip()
            if pid and not Path(f"/proc/{pid}").exists():
                return False
        time.sleep(2)
    return False


def batch(base: str, name: str, size: int, out_tokens: int, prompt_words: int,
          barrier: threading.Barrier | None = None, seed: int = 0, timeout: float = 300) -> dict:
    """`size` requests at once (ignore_eos, greedy): decode tokens/s of the whole batch."""
    results: list[dict | str] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        try:
            r = complete(base, name, prompt_of(prompt_words, seed * 100000 + i), out_tokens,
                         timeout=timeout)
            with lock:
                results.append(r["usage"])
        except Exception as exc:  # noqa: BLE001 - recorded, the figure says how many failed
            with lock:
                results.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=one, args=(i,)) for i in range(size)]
    if barrier is not None:
        barrier.wait()
    t0 = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - t0
    ok = [r for r in results if isinstance(r, dict)]
    tokens = sum(r["completion_tokens"] for r in ok)
    return {
        "batch": size,
        "ok": len(ok),
        "errors": sorted({r for r in results if isinstance(r, str)})[:3],
        "completion_tokens": tokens,
        "prompt_tokens": sum(r["prompt_tokens"] for r in ok),
        "wall_s": round(wall, 3),
        "tok_s": round(tokens / wall, 1) if wall else 0.0,
    }


def smi(out: Path, name: str) -> None:
    q = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=False)
    g = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name,memory.total,memory.used,utilization.gpu",
         "--format=csv"], capture_output=True, text=True, check=False)
    (out / f"{name}.txt").write_text(g.stdout + "== apps (pid, MiB)\n" + q.stdout)


def apps_mib() -> dict[str, int]:
    q = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True, text=True, check=False)
    found = {}
    for line in q.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[1].isdigit():
            found[parts[0]] = int(parts[1])
    return found


class PeakSampler(threading.Thread):
    """Samples nvidia-smi's per-process memory while a load runs; keeps each pid's peak."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak: dict[str, int] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            for pid, mib in apps_mib().items():
                self.peak[pid] = max(mib, self.peak.get(pid, 0))
            self.stop.wait(0.5)


def kv_facts(text: str) -> dict:
    """The start-up lines capacity planning is judged on, and their figures."""
    facts: dict[str, object] = {"lines": []}
    for line in text.splitlines():
        if any(re.search(p, line) for p in KV_LINES):
            facts["lines"].append(re.sub(r"\x1b\[[0-9;]*m", "", line)[-300:])  # type: ignore[union-attr]
    m = re.findall(r"GPU KV cache size: ([\d,]+) tokens", text)
    if m:
        facts["kv_tokens"] = int(m[-1].replace(",", ""))
    m = re.findall(r"Available KV cache memory: ([\d.]+) GiB", text)
    if m:
        facts["kv_gib"] = float(m[-1])
    m = re.findall(r"Model loading took ([\d.]+) GiB", text)
    if m:
        facts["weights_gib"] = float(m[-1])
    m = re.findall(r"Graph capturing finished in [\d.]+ secs?, took ([-\d.]+) GiB", text)
    if m:
        facts["graph_gib"] = float(m[-1])
    m = re.findall(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x", text)
    if m:
        facts["max_concurrency"] = float(m[-1][1])
    return facts


def unit_log(data_dir: Path, unit: str) -> str:
    for path in data_dir.rglob(f"{unit}/log"):
        return path.read_text(errors="replace")
    return ""


def save_unit_logs(out: Path, data_dir: Path) -> dict[str, dict]:
    facts = {}
    for path in sorted(data_dir.rglob("log")):
        unit = path.parent.name
        text = path.read_text(errors="replace")
        (out / f"{unit}.log").write_text(text[-400_000:])
        facts[unit] = kv_facts(text)
    return facts


# ---------------------------------------------------------------- scenarios


def phase0(out: Path, args: argparse.Namespace) -> dict:
    spec = {
        **header("g0", 0),
        "hosts": [host(0, "h200", [0])],
        "serve": {"port": 8000, "gpuMemoryUtilization": 0.9,
                  "extraArgs": ["--load-format", "dummy"]},
    }
    path = out / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    res: dict = {"spec": spec}
    k = ["--known-hosts", KNOWN]
    pdctl(out, "plan", "plan", str(path), "-o", "json")
    up = pdctl(out, "up", "up", str(path), "--yes", "--timeout", "600", *k)
    res["up_exit"] = up.returncode
    if up.returncode == 0:
        base = "http://127.0.0.1:8000/v1"
        first = complete(base, "qwen3-8b", prompt_of(32, 1), 16)
        (out / "completion.json").write_text(json.dumps(first, indent=1))
        res["completion_tokens"] = first["usage"]["completion_tokens"]
        batch(base, "qwen3-8b", 8, 16, 64)  # warm-up
        runs = []
        for size in args.batches:
            runs.append(batch(base, "qwen3-8b", size, args.out_tokens, args.prompt_words))
            log(f"whole GPU batch {size}: {runs[-1]['tok_s']} tok/s")
        res["batches"] = runs
        # `top --once` over a window in which a batch runs.
        load = threading.Thread(target=batch, args=(base, "qwen3-8b", 128, 512, 128))
        load.start()
        pdctl(out, "top", "top", str(path), "--once", "-o", "json", "--window", "10s", *k)
        load.join()
        (out / "metrics.txt").write_text(get("http://127.0.0.1:8000/metrics"))
        pdctl(out, "status", "status", str(path), "-o", "json", *k)
        smi(out, "nvidia-smi")
    res["units"] = save_unit_logs(out, DATA / "h200")
    pdctl(out, "down", "down", str(path), *k)
    return res


def bench_spec() -> dict:
    """Phase 0 Qwen3-8B with the workload `pdctl bench` sends (and `pdctl plan` predicts):
    1024-token prompts, 256-token outputs, a concurrency sweep, SLOs for goodput."""
    return {
        **header("gb", 0),
        "hosts": [host(0, "h200", [0])],
        "serve": {"port": 8000, "gpuMemoryUtilization": 0.9,
                  "extraArgs": ["--load-format", "dummy"]},
        "workload": {"promptTokens": 1024, "outputTokens": 256, "ttftMs": 500, "tpotMs": 50},
        "bench": {"requests": 128, "concurrency": [4, 32, 128], "seed": 1},
    }


def bench(out: Path, args: argparse.Namespace) -> dict:
    """`pdctl bench` against the phase 0 deployment; its report is kept as OUT/bench/bench.json
    (a fixture of a real GPU engine against its plan, docs/bench.md)."""
    spec = bench_spec()
    path = out / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    res: dict = {"spec": spec}
    k = ["--known-hosts", KNOWN]
    pdctl(out, "plan", "plan", str(path), "-o", "json")
    up = pdctl(out, "up", "up", str(path), "--yes", "--timeout", "600", *k)
    res["up_exit"] = up.returncode
    if up.returncode == 0:
        ran = pdctl(out, "bench", "bench", str(path), "--save", str(out / "bench.json"), *k,
                    timeout=3000)
        res["bench_exit"] = ran.returncode
        (out / "metrics.txt").write_text(get("http://127.0.0.1:8000/metrics"))
        smi(out, "nvidia-smi")
    res["units"] = save_unit_logs(out, DATA / "h200")
    pdctl(out, "down", "down", str(path), *k)
    return res


def external_tokens(metrics: str) -> float:
    m = re.search(r'^vllm:prompt_tokens_by_source_total\{[^}]*source="external_kv_transfer"'
                  r'[^}]*\} (\S+)$', metrics, re.M)
    return float(m.group(1)) if m else -1.0


def engine_core_pids(port: int) -> list[int]:
    """The EngineCore processes of the API server listening on PORT (psutil ships with vLLM)."""
    import psutil

    for conn in psutil.net_connections("tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            server = psutil.Process(conn.pid)
            return [c.pid for c in server.children(recursive=True)
                    if "EngineCore" in " ".join([c.name(), *c.cmdline()])]
    return []


def keep_logs(out: Path) -> None:
    """The phase 2 engines' logs so far, into OUT (a machine taken back mid-run keeps them)."""
    for name in ("h200a", "h200b"):
        save_unit_logs(out, DATA / name)


def burst(out: Path, path: Path, base: str, size: int, args: argparse.Namespace,
          k: list[str], nth: int = 0) -> dict:
    """`size` requests at once through the router (--pd-prompt-words prompts, 64 tokens), each
    given up after --burst-timeout s; the `nth` burst of a size gets prompts of its own (no
    prefix-cache hit on an earlier one). Still running 12 s in: `pdctl top` looks at it as a
    user would (a stalled KV transfer is its kv-transfer-stalled verdict) and decode's metrics
    are kept. Bursts after the engines' KV pools have been used through pull fragmented KV:
    a descriptor per block per KV region (docs/phase2-bare-metal.md, "Why the burst stalled")."""
    got: dict = {}
    seed, tag = size + 1000 * nth, str(size) if not nth else f"{size}-{nth + 1}"
    t = threading.Thread(target=lambda: got.update(
        batch(base, "qwen3-8b", size, 64, args.pd_prompt_words, timeout=args.burst_timeout,
              seed=seed)))
    t.start()
    t.join(12)
    if t.is_alive():
        pdctl(out, f"top-burst-{tag}", "top", str(path), "--once", "-o", "json", "--window",
              "8s", *k)
        for port, role in ((8100, "prefill"), (8200, "decode")):
            (out / f"metrics-{role}-burst-{tag}.txt").write_text(
                get(f"http://127.0.0.1:{port}/metrics"))
        # Mooncake's TCP transport opens connections per transfer: their states, mid-burst
        if shutil.which("ss"):
            sockets = subprocess.run(["ss", "-tan"], capture_output=True, text=True)
            (out / f"ss-burst-{tag}.txt").write_text(sockets.stdout + sockets.stderr)
    t.join()
    keep_logs(out)
    return got


def restart_case(out: Path, path: Path, role: str, port: int, base: str, prompts: list[str],
                 before: list[dict], k: list[str]) -> dict:
    """kill -9 of ROLE's EngineCore under the router, as a GPU fault would end it: how the API
    server exits, what `status` says, `up` bringing it back, then the same greedy prompts
    through the router (answers must equal the ones before) and `status --verify`."""
    pids = engine_core_pids(port)
    res: dict = {"engine_core_pids": pids}
    for pid in pids:
        os.kill(pid, 9)
    t0 = time.time()
    while time.time() - t0 < 90:
        try:
            get(f"http://127.0.0.1:{port}/health", timeout=3)
        except (urllib.error.URLError, OSError):
            break
        time.sleep(1)
    res["api_down_s"] = round(time.time() - t0, 1)
    try:
        complete(base, "qwen3-8b", prompts[0], 8, timeout=60)
        res["while_down"] = "answered"
    except Exception as exc:  # noqa: BLE001 - what the router said is the record
        res["while_down"] = f"{type(exc).__name__}: {exc}"
    pdctl(out, f"status-{role}-down", "status", str(path), "-o", "json", *k)
    t1 = time.time()
    up = pdctl(out, f"up-{role}-repair", "up", str(path), "--yes", "--timeout", "600", *k)
    res["repair_exit"], res["repair_s"] = up.returncode, round(time.time() - t1, 1)
    after, t2 = [], time.time()
    for prompt in prompts:
        try:
            after.append(complete(base, "qwen3-8b", prompt, 32))
        except Exception as exc:  # noqa: BLE001
            after.append({"error": f"{type(exc).__name__}: {exc}"})
    res["answers_s"] = round(time.time() - t2, 1)
    res["same_answers"] = [a.get("choices", [{}])[0].get("text") == b["choices"][0]["text"]
                           for a, b in zip(after, before, strict=True)]
    (out / f"completions-after-{role}.json").write_text(json.dumps(after, indent=1))
    verify = pdctl(out, f"status-{role}-verify", "status", str(path), "--verify", *k)
    res["verify_exit"] = verify.returncode
    keep_logs(out)
    log(f"restart {role}: repair {res['repair_exit']} same {res['same_answers']}")
    return res


# Prefill and decode share GPU 0 here, and start together: vLLM 0.23 sizes its KV cache from the
# device's free memory (torch.cuda.mem_get_info) across its profiling window, so each engine counts
# the other's weights as its own and, on an 80 GiB H100 at util 0.42, both fail with "No available
# memory for the cache blocks". A fixed KV size (--kv-cache-memory-bytes, 8 GiB) takes the
# profile's guess out; on separate GPUs, as in a real deployment, the race cannot happen.
SHARED_GPU_ARGS = ["--load-format", "dummy", "--kv-cache-memory-bytes", str(8 << 30)]


def phase2_spec(connector_name: str, extra_env: list[str] | None = None) -> dict:
    """phase2's spec: prefill on 'host' a, decode on 'host' b, both GPU 0, behind vllm-router;
    Mooncake over TCP with its connector logged at DEBUG (connector_debug_logging).
    `extra_env`: KEY=VALUE for both engines (--engine-env), e.g. Mooncake's
    MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER to test whether its TCP lane queue stalls a burst."""
    connector = {"connector": connector_name}
    head = header("g2" if connector_name == "nixl" else f"g2{connector_name}", 2)
    env = dict(ENGINE_ENV)
    if connector_name == "mooncake":
        connector["protocol"] = "tcp"
        DATA.mkdir(parents=True, exist_ok=True)
        logging_json = DATA / "vllm-logging.json"
        logging_json.write_text(json.dumps(connector_debug_logging(), indent=1))
        env["VLLM_LOGGING_CONFIG_PATH"] = str(logging_json)
    env.update(e.split("=", 1) for e in extra_env or [])
    head["engine"] = {**head["engine"], "env": env}
    return {
        **head,
        "hosts": [host(0, "h200a", [0]), host(1, "h200b", [0])],
        "prefill": {"replicas": 1, "hosts": ["h200a"], "gpuMemoryUtilization": 0.42,
                    "extraArgs": SHARED_GPU_ARGS},
        "decode": {"replicas": 1, "hosts": ["h200b"], "gpuMemoryUtilization": 0.42,
                   "extraArgs": SHARED_GPU_ARGS},
        "disaggregation": connector,
        "router": {"venv": VENV, "port": 8300, "metricsPort": 8301},
    }


def phase2(out: Path, args: argparse.Namespace) -> dict:
    """P/D on one GPU (NIXL, or Mooncake over TCP with --connector mooncake): prefill on 'host'
    a, decode on 'host' b, both GPU 0 of this machine (two loopback addresses of one sshd),
    each with its own util, behind vllm-router. With --restarts: kill -9 of decode's, then
    prefill's EngineCore and `up` repairing it; with --bench-s: `pdctl bench` with no bench
    section, bounded to that many seconds, its output kept."""
    spec = phase2_spec(args.connector, args.engine_env)
    path = out / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    res: dict = {"spec": spec}
    k = ["--known-hosts", KNOWN]
    pdctl(out, "validate", "validate", str(path))
    pdctl(out, "render", "render", str(path))
    if args.connector == "mooncake":
        pdctl(out, "preflight", "preflight", str(path), *k, timeout=300)
    t0 = time.time()
    up = pdctl(out, "up", "up", str(path), "--yes", "--timeout", "600", *k)
    res["up_exit"], res["up_s"] = up.returncode, round(time.time() - t0, 1)
    try:  # whatever breaks, the record so far, the engines' logs and `down` still happen
        if up.returncode == 0:
            phase2_steps(out, path, args, res, k, up.stdout)
    except Exception as exc:  # noqa: BLE001 - a failed step is recorded, not lost
        import traceback

        res["error"] = f"{type(exc).__name__}: {exc}"
        res["traceback"] = traceback.format_exc()
        log(res["error"])
    for name in ("h200a", "h200b"):
        res.setdefault("units", {}).update(save_unit_logs(out, DATA / name))
    pdctl(out, "down", "down", str(path), *k)
    return res


def phase2_steps(out: Path, path: Path, args: argparse.Namespace, res: dict, k: list[str],
                 up_out: str) -> None:
    """phase2 once `up` is healthy: completions through the router, a batch, top, status, the
    restart cases, the bench; each writes its part of RES as it goes."""
    urls = re.findall(r"(http://\S+/v1)\s", up_out)
    base = urls[0] if urls else "http://127.0.0.1:8300/v1"
    res["endpoint"] = base
    decode_port = 8200
    before = external_tokens(get(f"http://127.0.0.1:{decode_port}/metrics"))
    prompts = [prompt_of(200, 10 + i) for i in range(4)]
    answers = [complete(base, "qwen3-8b", p, 32) for p in prompts]
    after = external_tokens(get(f"http://127.0.0.1:{decode_port}/metrics"))
    (out / "completions.json").write_text(json.dumps(answers, indent=1))
    res["external_kv_tokens"] = [before, after]
    res["request_ids"] = [a["id"] for a in answers]
    log(f"phase 2: external tokens {before} -> {after}")
    res["pd_batches"] = {}
    for i, size in enumerate(args.pd_batches):  # the last one's figures stay `pd_batch`
        nth = args.pd_batches[:i].count(size)
        key = str(size) if not nth else f"{size}#{nth + 1}"
        done = res["pd_batch"] = res["pd_batches"][key] = burst(out, path, base, size, args, k,
                                                                nth)
        log(f"phase 2: burst of {size}: {done['ok']} ok, {done['tok_s']} tok/s")
        if done["ok"] < size:
            break  # a stalled burst: the restart cases below start from here
    for port, role in ((8100, "prefill"), (decode_port, "decode")):
        (out / f"metrics-{role}.txt").write_text(get(f"http://127.0.0.1:{port}/metrics"))
    load = threading.Thread(target=batch, args=(base, "qwen3-8b", 16, 64, 256))
    load.start()
    pdctl(out, "top", "top", str(path), "--once", "-o", "json", "--window", "8s", *k)
    load.join()
    pdctl(out, "status", "status", str(path), "-o", "json", *k)
    smi(out, "nvidia-smi")
    keep_logs(out)
    if args.restarts:
        res["restarts"] = {
            role: restart_case(out, path, role, port, base, prompts, answers, k)
            for role, port in (("decode", decode_port), ("prefill", 8100))
            if role in args.restart_roles}
    if args.bench_s:
        t1 = time.time()
        ran = pdctl(out, "bench", "bench", str(path), "--save", str(out / "bench.json"), *k,
                    timeout=int(args.bench_s))
        res["bench_exit"], res["bench_s"] = ran.returncode, round(time.time() - t1, 1)
        for port, role in ((8100, "prefill"), (decode_port, "decode")):
            (out / f"metrics-{role}-after-bench.txt").write_text(
                get(f"http://127.0.0.1:{port}/metrics"))


def phase3_spec(n: int, lib: str, total_mib: int) -> dict:
    """examples/phase3-hami-hosts.yaml on this one-GPU machine: GPU 1 (absent) listed first so
    prefill takes it; the n decode slices land on GPU 0. Only the decode units are started."""
    return {
        **header(f"g3n{n}", 3),
        "hosts": [host(0, "h200", [1, 0])],
        "prefill": {"replicas": 1, "extraArgs": ["--load-format", "dummy"]},
        "decode": {"replicas": n, "port": 8400,
                   "share": {"perGpu": n, "gpuTotalMib": total_mib, "library": lib},
                   "extraArgs": ["--load-format", "dummy"]},
        "disaggregation": {"connector": "nixl"},
        "router": {"venv": VENV},
    }


def together(ports: list[int], size: int, args: argparse.Namespace) -> list[dict]:
    """A batch of `size` on every engine at once (a barrier starts them together)."""
    barrier = threading.Barrier(len(ports))
    found: dict[int, dict] = {}

    def run(i: int, port: int) -> None:
        found[i] = batch(f"http://127.0.0.1:{port}/v1", "qwen3-8b", size, args.out_tokens,
                         args.prompt_words, barrier, seed=i)

    threads = [threading.Thread(target=run, args=(i, p)) for i, p in enumerate(ports)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [found[i] for i in range(len(ports))]


def phase3(out: Path, args: argparse.Namespace) -> dict:
    res: dict = {"shapes": {}}
    for n in args.per_gpu:
        sub = out / f"n{n}"
        sub.mkdir(parents=True, exist_ok=True)
        spec = phase3_spec(n, args.hami_lib, args.gpu_total_mib)
        path = sub / "spec.yaml"
        path.write_text(yaml.safe_dump(spec, sort_keys=False))
        pdctl(sub, "plan", "plan", str(path), "-o", "json")
        bundle = sub / "bundle"
        pdctl(sub, "render", "render", str(path), "--output-dir", str(bundle))
        units = sorted(p for p in (bundle / "hosts" / "h200").iterdir() if "-decode-" in p.name)
        shape: dict = {"units": {}}
        ports = []
        for unit in units:
            script = (unit / "start.sh").read_text()
            ports.append(int(re.search(r"--port (\d+)", script).group(1)))
            r = subprocess.run(["bash", str(unit / "start.sh")], capture_output=True, text=True,
                               check=False)
            log(f"{unit.name}: start rc {r.returncode} {r.stdout.strip()[-120:]}")
        data = DATA / "h200" / spec["name"]
        healthy = [wait_healthy(port, 540, data / unit.name / "pid")
                   for port, unit in zip(ports, units, strict=True)]
        shape["healthy"] = healthy
        log(f"n={n}: healthy {healthy}")
        if all(healthy):
            for size in args.slice_batches:
                sampler = PeakSampler()
                sampler.start()
                per = together(ports, size, args)
                sampler.stop.set()
                sampler.join()
                shape.setdefault("batches", []).append({
                    "batch_per_engine": size,
                    "per_engine": per,
                    "per_gpu_tok_s": round(sum(p["tok_s"] for p in per), 1),
                    "peak_mib_by_pid": sampler.peak,
                })
                log(f"n={n} B={size}: per GPU {shape['batches'][-1]['per_gpu_tok_s']} tok/s")
            smi(sub, "nvidia-smi")
        for unit in units:
            pid_file = data / unit.name / "pid"
            shape["units"][unit.name] = {
                "pid": pid_file.read_text().strip() if pid_file.exists() else None,
                **kv_facts(unit_log(DATA / "h200", unit.name)),
            }
            subprocess.run(["bash", str(unit / "stop.sh")], capture_output=True, check=False)
        save_unit_logs(sub, data)
        shutil.rmtree(data, ignore_errors=True)
        res["shapes"][str(n)] = shape
        wait_gpu_free()
    return res


def wait_gpu_free(limit_s: float = 60) -> None:
    """End leftover engine processes by pid, then wait until the GPU's memory is free."""
    end = time.time() + limit_s
    while time.time() < end:
        pids = apps_mib()
        if not pids:
            return
        for pid in pids:
            subprocess.run(["kill", "-9", pid], capture_output=True, check=False)
        time.sleep(2)


STARTUPS = {
    # name: (model folder, extra vllm args)
    "qwen3-8b-u0.5-eager": ("qwen3-8b", ["--gpu-memory-utilization", "0.5", "--enforce-eager"]),
    "qwen3-8b-u0.7-fp8kv": ("qwen3-8b", ["--gpu-memory-utilization", "0.7",
                                         "--kv-cache-dtype", "fp8"]),
    "qwen3-8b-u0.8-seqs128": ("qwen3-8b", ["--gpu-memory-utilization", "0.8", "--max-num-seqs",
                                           "128", "--max-num-batched-tokens", "4096"]),
    "qwen3-30b-a3b-u0.9": ("qwen3-30b-a3b", ["--gpu-memory-utilization", "0.9"]),
    "deepseek-v2-lite-u0.9": ("deepseek-v2-lite", ["--gpu-memory-utilization", "0.9"]),
    "gemma-2-9b-u0.85": ("gemma-2-9b", ["--gpu-memory-utilization", "0.85", "--dtype",
                                        "bfloat16"]),
    "mistral-7b-u0.6": ("mistral-7b", ["--gpu-memory-utilization", "0.6"]),
    "qwen3-30b-a3b-u0.6-eager": ("qwen3-30b-a3b", ["--gpu-memory-utilization", "0.6",
                                                   "--enforce-eager"]),
    "qwen3-8b-u0.95-32k": ("qwen3-8b", ["--gpu-memory-utilization", "0.95",
                                        "--max-model-len", "32768"]),
    "deepseek-v2-lite-u0.7-seqs256": ("deepseek-v2-lite", ["--gpu-memory-utilization", "0.7",
                                                           "--max-num-seqs", "256"]),
    # LoRA buffers (issue 26): the same engine without and with adapters' GPU slots.
    "qwen3-8b-u0.9": ("qwen3-8b", ["--gpu-memory-utilization", "0.9"]),
    "qwen3-8b-u0.9-lora4r16": ("qwen3-8b", ["--gpu-memory-utilization", "0.9", "--enable-lora",
                                            "--max-loras", "4", "--max-lora-rank", "16"]),
    "qwen3-8b-u0.9-lora8r64": ("qwen3-8b", ["--gpu-memory-utilization", "0.9", "--enable-lora",
                                            "--max-loras", "8", "--max-lora-rank", "64"]),
    # Issue 37: speculative decoding, a hybrid Mamba-2 model, native KV offloading to CPU. The
    # held-out third is chosen by tests/capacity/h200_logs.py's `held_out` (the log's file name).
    "qwen3-8b-u0.9-eagle3-k3": ("qwen3-8b", ["--gpu-memory-utilization", "0.9",
                                             "--speculative-config", json.dumps(
                                                 {"method": "eagle3", "num_speculative_tokens": 3,
                                                  "model": str(MODELS / "qwen3-8b-eagle3")})]),
    "qwen3-8b-u0.8-eagle3-k5": ("qwen3-8b", ["--gpu-memory-utilization", "0.8",
                                             "--speculative-config", json.dumps(
                                                 {"method": "eagle3", "num_speculative_tokens": 5,
                                                  "model": str(MODELS / "qwen3-8b-eagle3")})]),
    "mimo-7b-u0.9-mtp1": ("mimo-7b", ["--gpu-memory-utilization", "0.9", "--speculative-config",
                                      json.dumps({"method": "mtp", "num_speculative_tokens": 1})]),
    "mimo-7b-u0.9": ("mimo-7b", ["--gpu-memory-utilization", "0.9"]),
    "nemotron-h-8b-u0.9": ("nemotron-h-8b", ["--gpu-memory-utilization", "0.9"]),
    "nemotron-h-8b-u0.7-seqs64": ("nemotron-h-8b", ["--gpu-memory-utilization", "0.7",
                                                    "--max-num-seqs", "64"]),
    "qwen3-8b-u0.9-offload16": ("qwen3-8b", ["--gpu-memory-utilization", "0.9",
                                             "--kv-offloading-size", "16"]),
}


def startups(out: Path, args: argparse.Namespace) -> dict:
    """Plain `vllm serve` start-ups with dummy weights, for the capacity model: each engine
    runs until it serves (KV sized, graphs captured), then is stopped."""
    res: dict = {}
    deadline = time.time() + args.budget_s
    vllm = str(Path(VENV) / "bin" / "vllm")
    names = args.only or list(STARTUPS)
    for name in names:
        if time.time() + 75 > deadline:
            res[name] = {"skipped": "out of this call's time"}
            continue
        folder, extra = STARTUPS[name]
        cmd = [vllm, "serve", str(MODELS / folder), "--load-format", "dummy", "--port", "8500",
               "--skip-tokenizer-init", *extra]
        if "--max-model-len" not in extra:
            cmd += ["--max-model-len", "4096"]
        env = {**os.environ, **ENGINE_ENV}
        logf = out / f"{name}.log"
        t0 = time.time()
        with logf.open("w") as fh:
            fh.write("$ " + " ".join(cmd) + "\n")
            fh.flush()
            proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            ok = wait_healthy(8500, min(240, deadline - time.time()))
        os.killpg(proc.pid, 9)
        proc.wait()
        text = logf.read_text(errors="replace")
        res[name] = {"cmd": cmd[1:], "served": ok, "start_s": round(time.time() - t0, 1),
                     **kv_facts(text)}
        log(f"{name}: served {ok} kv {res[name].get('kv_tokens')} in {res[name]['start_s']} s")
        wait_gpu_free()
    return res


def engine_cells(out: Path, name: str, label: str, extra: list[str], util: float,
                 cells: list[tuple[Any, ...]], args: argparse.Namespace,
                 deadline: float, gpu: str) -> dict:
    """One engine of model NAME with EXTRA vllm args up with `pdctl up`, the load CELLS
    (workload, prompt tokens, output tokens, concurrency) measured, down. Written to
    OUT/<label>.json as soon as it is done, so a call cut short keeps what it measured."""
    from tests.gpu import speed as sp

    k = ["--known-hosts", KNOWN]
    folder = MODELS / name
    if not (folder / "tokenizer.json").exists():
        subprocess.run([sys.executable, str(Path(__file__).with_name("tokenizer.py")),
                        str(folder)], check=False)
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    sub = out / label
    sub.mkdir(parents=True, exist_ok=True)
    spec = sp.spec_for(folder, name, host(0, "h200", [0]), {"version": "0.23.0",
                                                             "env": ENGINE_ENV},
                       extra=extra, util=util, gpu=gpu)
    path = sub / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    doc: dict = {"model": name, "label": label, "extra": extra, "util": util, "spec": spec,
                 "cells": {}}
    pdctl(sub, "plan", "plan", str(path), "-o", "json")
    t0 = time.time()
    up = pdctl(sub, "up", "up", str(path), "--yes", "--timeout", "600", *k)
    doc["up_exit"], doc["up_s"] = up.returncode, round(time.time() - t0, 1)
    if up.returncode == 0:
        metrics = "http://127.0.0.1:8000/metrics"
        # one request of each prompt length first, as `vllm bench serve` sends its initial
        # test prompt: a MoE engine compiles kernels at its first long prefill (0.5 s on the
        # H100), which the first cell would otherwise measure
        rng = random.Random(0)
        doc["warmup"] = [sp.stream_one("127.0.0.1", 8000, name, sp.prompt(pin, rng, vocab), 4)
                         .get("error", "ok") for pin in sorted({c[1] for c in cells})]
        for wname, pin, pout, c, *more in cells:  # more: (rate, repeat) of an open-loop cell
            rate, repeat = more if more else (None, 1)
            key = sp.rate_key(name, wname, rate, repeat) if rate else sp.cell_key(name, wname, c)
            if args.max_concurrency and c > args.max_concurrency:
                continue  # a model whose KV holds few sequences would queue for minutes
            if time.time() + (args.submit_s + 20 if rate else 45) > deadline:
                doc["cells"][key] = {"skipped": "out of this call's time"}
                continue
            before = sp.scrape(get(metrics))
            # a repeat of a cell sends the same prompts at the same times (its first run's seed)
            seed = int(hashlib.sha256(key.split("#")[0].encode()).hexdigest()[:8], 16)
            if rate:
                cell = sp.run_rate_cell("127.0.0.1", 8000, name, vocab, pin, pout, rate,
                                        seed=seed, submit_s=args.submit_s)
            else:
                cell = sp.run_cell("127.0.0.1", 8000, name, vocab, pin, pout, c, seed=seed,
                                   submit_s=args.submit_s)
            cell["engine_metrics"] = sp.delta(before, sp.scrape(get(metrics)))
            # a repeat shares its first run's side of the split (the same arrivals and prompts)
            # (the fresh cells are all held out: no fit ever sees them)
            cell["workload"] = wname
            cell["held_out"] = args.set == "fresh" or sp.held_out(key.split("#")[0])
            doc["cells"][key] = cell
            log(f"{label} {key}: ttft p50 {cell['ttft_ms']['p50']} tpot p50 "
                f"{cell['tpot_ms']['p50']} out tok/s {cell['output_tok_s']} "
                f"({cell['completed']}/{cell['requests']})")
        smi(sub, "nvidia-smi")
    units = save_unit_logs(sub, DATA / "h200")
    doc["units"] = units
    doc["engine"] = sp.engine_config("\n".join(unit_log(DATA / "h200", u) for u in units))
    pdctl(sub, "down", "down", str(path), *k)
    shutil.rmtree(DATA / "h200", ignore_errors=True)
    wait_gpu_free()
    doc["wall_s"] = round(time.time() - t0, 1)
    (out / f"{label}.json").write_text(json.dumps(doc, indent=1, default=str))
    return {"up_exit": doc["up_exit"], "cells": len(doc["cells"]), "wall_s": doc["wall_s"]}


def speed(out: Path, args: argparse.Namespace) -> dict:
    """Issue 35: each model up with `pdctl up`, the load cells of tests/gpu/speed.py, down."""
    from tests.gpu import speed as sp

    res: dict = {"gpu": sp.gpu_name()}
    deadline = time.time() + args.budget_s
    # Workloads interleaved (each one's lowest concurrency first), so a call cut short still
    # has cells of every workload.
    depth = max(len(w[3]) for w in sp.WORKLOADS)
    order = [(w[0], w[1], w[2], w[3][i]) for i in range(depth) for w in sp.WORKLOADS
             if i < len(w[3])]
    for name in args.only or list(sp.MODELS):
        need = 240 if "32b" in name else 150
        if time.time() + need > deadline:
            res[name] = {"skipped": "out of this call's time"}
            continue
        res[name] = engine_cells(out, name, name, [], 0.9, order, args, deadline, res["gpu"])
    return res


def rates(out: Path, args: argparse.Namespace) -> dict:
    """Issue 35: each model (--only, default Qwen3-8B and Mistral-7B) up with `pdctl up`, the
    open-loop cells of tests/gpu/speed.py RATE_SETS[--set] (RATE_WORKLOADS, each run
    RATE_REPEATS times in a row, or the never-fitted FRESH_RATE_WORKLOADS once), run with
    --submit-s 30, down."""
    from tests.gpu import speed as sp

    res: dict = {"gpu": sp.gpu_name(), "set": args.set}
    deadline = time.time() + args.budget_s
    workloads, repeats = sp.RATE_SETS[args.set]
    order = [(w, pin, pout, 0, rate, k + 1) for w, pin, pout, rs in workloads
             for rate in rs for k in range(repeats)]
    for name in args.only or ["qwen3-8b", "mistral-7b"]:
        if time.time() + 150 > deadline:
            res[name] = {"skipped": "out of this call's time"}
            continue
        res[name] = engine_cells(out, name, name, [], 0.9, order, args, deadline, res["gpu"])
    return res


def sweep(out: Path, args: argparse.Namespace) -> dict:
    """Issue 35, config quality: one model under several engine configurations (SWEEP_CONFIGS,
    or --only names of them), each measured on the same cells (SWEEP_CELLS), for goodput per GPU
    against SLOs computed afterwards from every request's TTFT and E2E."""
    from tests.gpu import speed as sp

    res: dict = {"gpu": sp.gpu_name()}
    deadline = time.time() + args.budget_s
    for label in args.only or list(sp.SWEEP_CONFIGS):
        extra, util = sp.SWEEP_CONFIGS[label]
        if time.time() + 90 > deadline:
            res[label] = {"skipped": "out of this call's time"}
            continue
        res[label] = engine_cells(out, sp.SWEEP_MODEL, label, extra, util,
                                  list(sp.SWEEP_CELLS), args, deadline, res["gpu"])
    return res


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["phase0", "phase2", "phase3", "startups", "bench",
                                        "speed", "rates", "sweep"])
    p.add_argument("out", type=Path)
    p.add_argument("--batches", type=int, nargs="*", default=[64, 128, 192, 256])
    p.add_argument("--slice-batches", type=int, nargs="*", default=[64])
    p.add_argument("--per-gpu", type=int, nargs="*", default=[2, 3, 4])
    p.add_argument("--out-tokens", type=int, default=256)
    p.add_argument("--prompt-words", type=int, default=128)
    p.add_argument("--hami-lib", default="/tmp/hami/build/libvgpu.so")
    p.add_argument("--gpu-total-mib", type=int, default=143771)
    p.add_argument("--budget-s", type=float, default=500)
    p.add_argument("--submit-s", type=float, default=25.0)  # speed: a cell's sending time
    p.add_argument("--only", nargs="*")
    p.add_argument("--set", choices=["main", "fresh"], default="main")  # rates: which cells
    p.add_argument("--max-concurrency", type=int, default=0)  # speed: skip larger cells
    p.add_argument("--connector", choices=["nixl", "mooncake"], default="nixl")  # phase2
    p.add_argument("--restarts", action="store_true")  # phase2: kill -9 EngineCore, repair
    p.add_argument("--restart-roles", nargs="*", default=["decode", "prefill"])  # which ones
    p.add_argument("--bench-s", type=float, default=0)  # phase2: pdctl bench, bounded
    # phase2: bursts through the router, smallest first, stopping at the first that stalls
    p.add_argument("--pd-batches", type=int, nargs="*", default=[32])
    p.add_argument("--pd-prompt-words", type=int, default=256)  # phase2: a burst's prompts
    p.add_argument("--engine-env", action="append", default=[], metavar="KEY=VALUE")  # phase2
    p.add_argument("--burst-timeout", type=float, default=300)  # phase2: a burst request's
    args = p.parse_args()
    out = args.out / args.scenario
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    try:
        res = globals()[args.scenario](out, args)
    except Exception as exc:  # noqa: BLE001 - a failed run is recorded, not lost
        import traceback

        res = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        log(res["error"])
    res["wall_s"] = round(time.time() - t0, 1)
    (out / "results.json").write_text(json.dumps(res, indent=1, default=str))
    log(f"{args.scenario} done in {res['wall_s']} s")


if __name__ == "__main__":
    main()
