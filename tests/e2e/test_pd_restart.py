"""E2E: P/D survives a restart of either side under vllm-router (issue 36). The NIXL deployment
of test_phase2 (real vLLM CPU build, NixlConnector over UCX on loopback, vllm-router in PD mode,
`pdctl up` over SSH); `kill -9` of an engine's EngineCore (not its API server: vLLM's API server
then exits 0 by itself), `pdctl up` repairs it (the nohup path's supervisor), and afterwards:

- greedy answers through the router are the ones given before the restart;
- a request whose KV the prefill handed out before the decode could read it (the decode
  restarted meanwhile, or took a restarted prefill's first handshake) is still decoded from
  its own prompt's KV: with vLLM's default NIXL lease (30 s) the prefill freed those blocks,
  other prompts reused them and the decode answered 200 with another prompt's tokens;
  pdctl renders kv_lease_duration (pdctl/plan/kv.py NIXL_KV_LEASE_S) so they stay held;
- the P/D canary passes.

Prefill runs with 32 KV blocks (`--num-gpu-blocks-override`), so a handful of other prompts
reuse every free block, as on a loaded GPU; vLLM's free-block queue otherwise hands out the
other 32k blocks of the CPU cache first and a freed block keeps its old content."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.e2e.common import down, model_section, pd_spec, up
from tests.helpers import known, wait_until
from tests.targets.testbed import pdctl, write_spec

pytestmark = pytest.mark.e2e
PREFILL, DECODE, ROUTER, METRICS, SIDE = 18800, 18801, 18802, 18803, 18804
API_KEY = "sk-e2e-pd-restart-7c1d"
NAME = "e2epdr"
ENV = {"PDCTL_E2E_API_KEY": API_KEY}
HOLD = 40  # seconds the decode half waits: past vLLM's 30 s default lease, under pdctl's 240
WORDS = "river stone light cloud number garden paper engine window silver market yellow".split()


def prompt(tag: str, n: int = 60) -> str:
    """A prompt of ~200 tokens (7 blocks of 32) no other test sends: no prefix cache hit."""
    return tag + " " + " ".join(WORDS[(i * 7 + len(tag)) % len(WORDS)] for i in range(n))


def post(url: str, body: dict, key: str | None = None) -> tuple[int, dict | str]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace")[:300]


def greedy(text: str, tokens: int = 12) -> dict:
    return {"model": "tiny", "prompt": text, "max_tokens": tokens, "temperature": 0,
            "ignore_eos": True}


def text_of(answer: tuple[int, dict | str]) -> str:
    status, doc = answer
    assert status == 200 and isinstance(doc, dict), answer
    return doc["choices"][0]["text"]


def via_router(text: str) -> str:
    return text_of(post(f"http://127.0.0.1:{ROUTER}/v1/completions", greedy(text)))


def alone(text: str) -> str:
    """The single-engine answer: prefill asked directly, with no kv_transfer_params."""
    return text_of(post(f"http://127.0.0.1:{PREFILL}/v1/completions", greedy(text), API_KEY))


def prefill_half(text: str) -> dict:
    """What vllm-router does first in PD mode: prefill with do_remote_decode; the answer's
    kv_transfer_params name the blocks prefill now holds for a decode to read."""
    body = {**greedy(text, 1), "kv_transfer_params": {
        "do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None,
        "remote_block_ids": None, "remote_host": None, "remote_port": None}}
    status, doc = post(f"http://127.0.0.1:{PREFILL}/v1/completions", body, API_KEY)
    assert status == 200 and isinstance(doc, dict), doc
    return doc["kv_transfer_params"]


def decode_half(text: str, params: dict) -> str:
    body = {**greedy(text), "kv_transfer_params": params}
    return text_of(post(f"http://127.0.0.1:{DECODE}/v1/completions", body, API_KEY))


def reuse_prefill_blocks(tag: str) -> None:
    """Five other prompts of 7 blocks through prefill: more than its 32 blocks."""
    for i in range(5):
        text_of(post(f"http://127.0.0.1:{PREFILL}/v1/completions",
                     greedy(prompt(f"{tag} other {i}"), 1), API_KEY))


def unit_dir(data: Path, unit: str) -> Path:
    return data / "lo1" / NAME / f"{NAME}-{unit}"


def engine_core(data: Path, unit: str) -> tuple[int, int]:
    """(API server pid, EngineCore pid): vLLM titles its engine process VLLM::EngineCore
    (setproctitle, so /proc/PID/cmdline reads that); it is a child of `vllm serve`."""
    server = int((unit_dir(data, unit) / "pid").read_text().split()[0])
    children = subprocess.run(["pgrep", "-P", str(server)], capture_output=True, text=True)
    for child in children.stdout.split():
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes().replace(b"\0", b" ")
        if b"VLLM::EngineCore" in cmdline:
            return server, int(child)
    raise AssertionError(f"no VLLM::EngineCore child of {unit}'s API server {server}")


def gone(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def status_rows(spec: Path, env) -> dict[str, dict]:
    shown = pdctl("status", str(spec), "-o", "json", *known(env), env=ENV)
    return {r["role"]: r for r in json.loads(shown.stdout)["instances"]}


def log_lines(data: Path, unit: str, words: str) -> list[str]:
    return [line for line in (unit_dir(data, unit) / "log").read_text(errors="replace")
            .splitlines() if words in line]


@pytest.fixture(scope="module")
def pd(vllm_cpu, ssh_env, tmp_path_factory):
    data = tmp_path_factory.mktemp("pdrestart")
    doc = pd_spec(vllm_cpu, ssh_env, data, NAME, (PREFILL, DECODE, ROUTER, METRICS))
    doc["model"] = {**model_section(vllm_cpu), "config": str(vllm_cpu.model / "config.json")}
    doc["disaggregation"]["sideChannelPort"] = SIDE  # clear of other tests' engines (5600)
    doc["prefill"]["extraArgs"] += ["--num-gpu-blocks-override", "32"]
    doc["bench"] = {"canaryPrompts": 2, "canaryTokens": 8}
    spec = write_spec(data / "spec.yaml", doc)
    result = up(spec, ssh_env, ENV)
    assert result.returncode == 0, result.stdout + result.stderr
    before = {t: via_router(t) for t in (prompt("before a"), prompt("before b"))}
    assert before == {t: alone(t) for t in before}  # P/D agrees with one engine
    yield spec, data, before
    down(spec, *known(ssh_env))


def restart(spec: Path, data: Path, env, unit: str, role: str) -> None:
    """kill -9 the unit's EngineCore; its API server exits by itself, `status` shows the unit
    stopped, and `up` (the nohup path's repair) starts it again."""
    server, core = engine_core(data, unit)
    os.kill(core, signal.SIGKILL)
    wait_until(lambda: gone(server), f"{unit}'s API server exiting", timeout=300, step=0.5)
    assert status_rows(spec, env)[role]["health"] != "healthy"
    repaired = up(spec, env, ENV)
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr
    print(repaired.stdout + repaired.stderr)
    assert f"{NAME}-{unit}" in repaired.stdout + repaired.stderr
    assert not gone(engine_core(data, unit)[1])
    assert status_rows(spec, env)[role]["health"] == "healthy"


def test_decode_restart_answers_agree_and_held_kv_survives(pd, ssh_env):
    """The decode's EngineCore dies; after `up`, the router's answers are those of before,
    and a request whose decode half comes more than 30 s after its prefill half (held by the
    restarted decode's first handshake, its queue or the router) is decoded from its own KV."""
    spec, data, before = pd
    started = time.monotonic()
    restart(spec, data, ssh_env, "decode-0", "decode")
    print(f"decode restarted in {time.monotonic() - started:.0f} s")
    # vllm-router marks the decode healthy again after one check (pdctl renders
    # --health-success-threshold 1); its answers are those of before the restart
    wait_until(lambda: post(f"http://127.0.0.1:{ROUTER}/v1/completions",
                            greedy(prompt("router probe d")))[0] == 200,
               "the router sending to the restarted decode", timeout=60, step=1)
    assert {t: via_router(t) for t in before} == before
    held = prompt("held by the new decode")
    params = prefill_half(held)
    time.sleep(HOLD)
    reuse_prefill_blocks("after the decode restart")
    assert decode_half(held, params) == alone(held)
    assert log_lines(data, "prefill-0", "Potentially invalid KV blocks") == []


def test_prefill_restart_answers_agree_held_kv_survives_and_canary_passes(pd, ssh_env):
    """The prefill's EngineCore dies; after `up`, the router's answers are those of before,
    a request held past 30 s by a decode meeting the new prefill for the first time is
    decoded from its own KV, and `pdctl bench --canary-only` passes."""
    spec, data, before = pd
    started = time.monotonic()
    restart(spec, data, ssh_env, "prefill-0", "prefill")
    print(f"prefill restarted in {time.monotonic() - started:.0f} s")
    wait_until(lambda: post(f"http://127.0.0.1:{ROUTER}/v1/completions",
                            greedy(prompt("router probe p")))[0] == 200,
               "the router sending to the restarted prefill", timeout=60, step=1)
    assert {t: via_router(t) for t in before} == before
    held = prompt("held by the new prefill")
    params = prefill_half(held)
    time.sleep(HOLD)
    reuse_prefill_blocks("after the prefill restart")
    assert decode_half(held, params) == alone(held)
    canary = pdctl("bench", str(spec), "--canary-only", "-o", "json", *known(ssh_env),
                   env=ENV, timeout=600)
    assert canary.returncode == 0, canary.stdout + canary.stderr
    verdict = json.loads(canary.stdout)["canary"]
    assert verdict["ok"] and {p["via"] for p in verdict["pairs"]} == {
        f"{NAME}-prefill-0 -> {NAME}-decode-0"}, verdict
    assert log_lines(data, "prefill-0", "Releasing expired KV blocks") == []


def test_pdctl_restart_of_a_running_decode_gives_a_new_engine_and_the_same_answers(pd, ssh_env):
    """`pdctl restart SPEC DECODE` on the real engines: decode's API server and EngineCore are
    new processes, prefill and the router keep theirs, the router's answers are those of
    before, and `status --verify`'s P/D canary passes."""
    spec, data, before = pd
    server, core = engine_core(data, "decode-0")
    kept = engine_core(data, "prefill-0")
    started = time.monotonic()
    done = pdctl("restart", str(spec), f"{NAME}-decode-0", "--yes", "--timeout", "600",
                 *known(ssh_env), env=ENV, timeout=900)
    print(f"pdctl restart took {time.monotonic() - started:.0f} s\n{done.stdout}{done.stderr}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"restarted {NAME}-decode-0: healthy." in done.stdout
    assert gone(server) and gone(core)
    assert engine_core(data, "prefill-0") == kept
    wait_until(lambda: post(f"http://127.0.0.1:{ROUTER}/v1/completions",
                            greedy(prompt("router probe r")))[0] == 200,
               "the router sending to the restarted decode", timeout=60, step=1)
    assert {t: via_router(t) for t in before} == before
    verified = pdctl("status", str(spec), "--verify", *known(ssh_env), env=ENV, timeout=600)
    assert verified.returncode == 0, verified.stdout + verified.stderr
