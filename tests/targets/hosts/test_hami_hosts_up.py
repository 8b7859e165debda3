"""Phase 3 on hosts, the whole lifecycle over a real SSH host with the stand-in engine: `up`
starts prefill and two decode slices packed on one GPU, each decode engine runs with the
HAMi-core variables pdctl rendered (read back from the running process's /proc environ and
memory maps: a real shared object, built here with gcc, is preloaded), `down` stops them all.
A library that is missing on the host stops the decode start with pdctl's one line."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import checked, known
from tests.targets.testbed import (
    HERE,
    SshEnv,
    deployed,
    free_port,
    host_entry,
    pdctl,
    processes_in,
    status_rows,
    write_spec,
)

NIXL = "# stand-in for the NIXL package: start.sh checks `import nixl`\n"
ROUTER = '''#!/usr/bin/env python3
"""A stand-in vllm-router: /liveness, and /v1/models listing the stand-in model."""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": [{"id": "stand-in"}]}).encode()
        self.send_response(200)
        self.end_headers()
        if self.path == "/v1/models":
            self.wfile.write(body)
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
'''


def router_venv(tmp: Path) -> Path:
    """tmp/router-venv, whose bin/vllm-router is the stand-in router (ROUTER)."""
    router = tmp / "router-venv"
    (router / "bin").mkdir(parents=True)
    (router / "bin" / "vllm-router").write_text(ROUTER)
    (router / "bin" / "vllm-router").chmod(0o755)
    return router


def environment(tmp: Path) -> tuple[Path, Path, Path]:
    """An engine venv (the stand-in `vllm`, an importable `nixl`), a router venv (a stand-in
    `vllm-router`), and a do-nothing shared object to preload."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is needed to build the preloaded shared object")
    venv = tmp / "engine-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    shutil.copy(HERE / "fake_vllm.py", venv / "bin" / "vllm")
    (venv / "bin" / "vllm").chmod(0o755)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "nixl.py").write_text(NIXL)
    router = router_venv(tmp)
    src = tmp / "preload.c"
    src.write_text("int pdctl_test_preload(void) { return 0; }\n")
    lib = tmp / "lib-dir" / "libvgpu.so"
    lib.parent.mkdir()
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return venv, router, lib


def spec_file(env: SshEnv, tmp: Path, venv: Path, router: Path, library: Path) -> Path:
    if not any(h.name == "lo1" for h in env.hosts):
        pytest.skip("needs the loopback test host lo1")
    share = {"perGpu": 2, "gpuTotalMib": 143771, "gpuCoresPercent": 40, "library": str(library)}
    spec = {
        "name": "slices", "phase": 3, "model": {"name": "stand-in", "servedName": "stand-in"},
        "engine": {"version": "0.33.0"},
        "hosts": [host_entry(env, env.host("lo1"), tmp, venv=str(venv), gpus=[0, 1])],
        "prefill": {"replicas": 1, "port": free_port()},
        "decode": {"replicas": 2, "port": free_port(), "share": share},
        "disaggregation": {"connector": "nixl", "sideChannelPort": free_port()},
        "router": {"port": free_port(), "metricsPort": free_port(), "venv": str(router)},
    }
    return write_spec(tmp / "spec.yaml", spec)


def proc_env(pid: str) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode().split("=", 1) for p in raw if b"=" in p)


def test_up_runs_decode_slices_under_the_preload_and_down_stops_them(
    ssh_env: SshEnv, tmp_path: Path
) -> None:
    venv, router, lib = environment(tmp_path)
    spec = spec_file(ssh_env, tmp_path, venv, router, lib)
    with deployed(spec, *known(ssh_env)) as done:
        rows = status_rows(spec, *known(ssh_env), code=0)
        assert {"slices-prefill-0", "slices-decode-0", "slices-decode-1"} <= set(rows)
        caches = set()
        for name in ("slices-decode-0", "slices-decode-1"):
            assert rows[name]["health"] == "healthy", rows[name]
            env = proc_env(rows[name]["pid"])
            assert env["LD_PRELOAD"] == str(lib)
            assert env["CUDA_DEVICE_MEMORY_LIMIT"] == "71885m"  # 50% of 143771 MiB
            assert env["CUDA_DEVICE_SM_LIMIT"] == "40"
            assert env["CUDA_VISIBLE_DEVICES"] == "1"  # both slices share GPU 1
            cache = env["CUDA_DEVICE_MEMORY_SHARED_CACHE"]
            assert cache == str(tmp_path / "lo1" / "slices" / name / "vgpu.cache")
            caches.add(cache)
            maps = Path(f"/proc/{rows[name]['pid']}/maps").read_text()
            assert str(lib) in maps  # the loader really preloaded it
        assert len(caches) == 2
        prefill = proc_env(rows["slices-prefill-0"]["pid"])
        assert "LD_PRELOAD" not in prefill and "CUDA_DEVICE_MEMORY_LIMIT" not in prefill
        assert prefill["CUDA_VISIBLE_DEVICES"] == "0"
    assert done["down"].returncode == 0, done["down"].stdout + done["down"].stderr
    assert processes_in(tmp_path) == []


def test_a_missing_library_stops_the_decode_start_with_one_line(ssh_env: SshEnv, tmp_path) -> None:
    venv, router, lib = environment(tmp_path)
    spec = spec_file(ssh_env, tmp_path, venv, router, lib.parent / "absent.so")
    try:
        up = checked(pdctl("up", str(spec), "--yes", *known(ssh_env), "--timeout", "60"), 1)
        assert f"pdctl: HAMi-core library {lib.parent / 'absent.so'} is missing" in up.stderr
    finally:
        pdctl("down", str(spec), *known(ssh_env))
    assert processes_in(tmp_path) == []
