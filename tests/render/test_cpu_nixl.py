"""The CPU NIXL shape the lifecycle e2e uses (one prefill + one decode on one host, vLLM CPU
build, kv_buffer_device cpu, vllm-router in PD mode): the rendered scripts really run.

Stand-in executables replace vLLM and vllm-router (they serve /health and /liveness and record
their arguments); the scripts, the router's wait for the engines and stop.sh are the real ones.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import yaml

from pdctl.plan import make_plan
from pdctl.plan.router import router_service
from pdctl.render import render
from pdctl.spec import load_text
from tests.helpers import answers, wait_until
from tests.targets.testbed import free_port

FAKE = textwrap.dedent(
    """\
    #!{python}
    import http.server, json, os, sys
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    record = {{"args": args, "env": {{k: v for k, v in os.environ.items()
              if k.startswith(("VLLM_", "UCX_", "CUDA_", "OPENAI_"))}}}}
    record["engines_seen"] = sorted(os.listdir({marks!r}))
    name = "router" if "--vllm-pd-disaggregation" in args else "engine-" + str(port)
    with open(os.path.join({marks!r}, name), "w") as f:
        json.dump(record, f)
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path in ("/health", "/liveness") else 404)
            self.end_headers()
        def log_message(self, *a):
            pass
    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def free_ports(n: int) -> list[int]:
    """`n` ports from testbed.free_port, below the ephemeral range: the kernel's ports, once
    released, could become the local port of any outgoing connection (this test's own polls)
    before the stand-ins bind them, and a connect to a closed ephemeral port can connect to
    itself (TCP simultaneous open) and read as 'still served'."""
    return [free_port(1) for _ in range(n)]


def executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def cpu_spec(tmp: Path, ports: list[int], router_venv: bool = True) -> str:
    pre, dec, rport, metrics, side = ports
    host = {"name": "lo1", "address": "127.0.0.1", "runtime": "venv", "venv": str(tmp / "engine")}
    ucx = {"UCX_TLS": "sm,self,tcp", "UCX_NET_DEVICES": "lo"}
    spec = {
        "name": "tiny-pd", "phase": 2,
        "model": {"name": str(tmp / "tiny"), "servedName": "tiny", "maxModelLen": 256},
        "engine": {"version": "0.33.0", "device": "cpu", "env": ucx},
        "secrets": {"apiKey": {"env": "VLLM_API_KEY"}},
        "hosts": [{**host, "dataDir": str(tmp / "data")}],
        "prefill": {"replicas": 1, "port": pre, "enforceEager": True},
        "decode": {"replicas": 1, "port": dec, "enforceEager": True},
        "disaggregation": {"connector": "nixl", "sideChannelPort": side},
        "router": {"port": rport, "metricsPort": metrics, "waitMinutes": 2},
    }
    if router_venv:
        spec["router"]["venv"] = str(tmp / "router")
    return yaml.safe_dump(spec)


def test_plan_shape() -> None:
    spec, _ = load_text(cpu_spec(Path("/x"), [8100, 8200, 8000, 29000, 5600], False), "s.yaml")
    plan = make_plan(spec)
    pre, dec = plan.instances
    assert (pre.port, dec.port) == (8100, 8200) and not pre.gpus and not dec.gpus
    for inst in plan.instances:
        env = dict(inst.env)
        assert "CUDA_VISIBLE_DEVICES" not in env
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "127.0.0.1"
        cfg = json.loads(inst.args[inst.args.index("--kv-transfer-config") + 1])
        assert cfg["kv_buffer_device"] == "cpu" and cfg["kv_connector"] == "NixlConnector"
    side = "VLLM_NIXL_SIDE_CHANNEL_PORT"
    assert dict(pre.env)[side] != dict(dec.env)[side]
    router = router_service(plan)
    assert router.pip == "vllm-router==0.1.17"
    assert router.venv == "~/.pdctl/venv/vllm-router-0.1.17"
    paths = render(plan).paths()
    assert paths.index("hosts/lo1/tiny-pd-router/start.sh") > paths.index(
        "hosts/lo1/tiny-pd-decode-0/start.sh"
    )


def test_rendered_scripts_run(tmp_path: Path) -> None:
    marks = tmp_path / "marks"
    marks.mkdir()
    fake = FAKE.format(python=sys.executable, marks=str(marks))
    executable(tmp_path / "engine/bin/vllm", fake)
    executable(tmp_path / "router/bin/vllm-router", fake)
    (tmp_path / "pylib").mkdir()
    (tmp_path / "pylib/nixl.py").write_text("")
    ports = free_ports(5)
    spec, _ = load_text(cpu_spec(tmp_path, ports), "spec.yaml")
    bundle = render(make_plan(spec))
    deploy = tmp_path / "data/tiny-pd"
    for artifact in bundle:
        if artifact.path.startswith("hosts/lo1/"):
            dest = deploy / artifact.path.removeprefix("hosts/lo1/")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(artifact.text)
            dest.chmod(0o755 if artifact.executable else 0o644)
    (deploy / "secrets.env").write_text("VLLM_API_KEY=sk-test\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(tmp_path / "pylib")}
    units = ["tiny-pd-router", "tiny-pd-prefill-0", "tiny-pd-decode-0"]  # router first on purpose
    try:
        for unit in units:
            subprocess.run(["bash", str(deploy / unit / "start.sh")], env=env, check=True,
                           capture_output=True, text=True, timeout=60)
        logs = lambda: {u: (deploy / u / "log").read_text() for u in units  # noqa: E731
                        if (deploy / u / "log").exists()}
        wait_until(lambda: answers(f"http://127.0.0.1:{ports[2]}/liveness"), "the router",
                   timeout=180, detail=logs)
        router = json.loads((marks / "router").read_text())
        # The router started only after both engines were up.
        assert set(router["engines_seen"]) == {f"engine-{ports[0]}", f"engine-{ports[1]}"}
        assert router["env"]["OPENAI_API_KEY"] == "sk-test"
        args = router["args"]
        assert args[args.index("--prefill") + 1] == f"http://127.0.0.1:{ports[0]}"
        assert args[args.index("--decode") + 1] == f"http://127.0.0.1:{ports[1]}"
        engine = json.loads((marks / f"engine-{ports[0]}").read_text())
        assert engine["env"]["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(ports[4])
        assert "VLLM_API_KEY" in engine["env"]  # from secrets.env, never from the script
    finally:
        for unit in reversed(units):
            subprocess.run(["bash", str(deploy / unit / "stop.sh")], env=env,
                           capture_output=True, text=True, timeout=120)
    for unit in units:
        assert not (deploy / unit / "pid").exists()
    for port in ports[:3]:
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still served"
