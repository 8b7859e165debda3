"""Engines in containers for phases 2 and 3 and multi-node groups (`runtime: docker`): the host's
network (no `-p`), the unit folder, HAMi-core's library and lock, RDMA devices: the words
start.sh passes to `docker run`, exactly as bash parses the rendered line (the line run with
`printf` in place of `docker run`). The lifecycle on the real dockerd is
tests/targets/docker/test_pd_up.py."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from tests.conftest import ROOT
from tests.helpers import cli, written

HAMI_DOCKER = ROOT / "examples/phase3-hami-docker.yaml"
NIXL = ROOT / "examples/phase2-nixl-hosts.yaml"
RDMA = ROOT / "examples/phase2-mooncake-rdma.yaml"
MULTINODE = ROOT / "examples/phase0-multinode.yaml"


def plan_of(path: Path, change=None):
    doc = yaml.safe_load(path.read_text())
    if change is not None:
        change(doc)
    return make_plan(load_text(yaml.safe_dump(doc), "spec.yaml")[0])


def start_script(plan, unit: str) -> str:
    bundle = render(plan)
    return next(a.text for a in bundle.artifacts if a.path.endswith(f"/{unit}/start.sh"))


def docker_words(script: str, env: dict[str, str] | None = None) -> list[str]:
    """The words bash would pass to `docker run` (the rendered line, parsed by bash itself)."""
    start = script.index("docker run -d")
    end = script.index('>"$unit_dir/container-id"')
    line = script[start:end].replace("docker run", "printf '%s\\0'", 1)
    env = env or {"HOME": "/home/u", "unit_dir": "/home/u/.pdctl/x/unit", "container": "c"}
    env = {**env, "PATH": "/bin:/usr/bin"}
    out = subprocess.run(["bash", "-c", line], capture_output=True, env=env, check=True)
    return out.stdout.decode().split("\0")[:-1]


def options(words: list[str]) -> list[tuple[str, str]]:
    """(flag, value) pairs up to the image; switches get ''."""
    pairs, i = [], 0
    while i < len(words) and words[i].startswith("-"):
        flag = words[i]
        if flag in ("-d", "--ipc=host"):
            pairs.append((flag, ""))
            i += 1
        else:
            pairs.append((flag, words[i + 1]))
            i += 2
    return pairs


def test_a_decode_slice_in_a_container_gets_exactly_the_host_network_flags() -> None:
    script = start_script(plan_of(HAMI_DOCKER), "qwen-hami-docker-decode-1")
    got = [p for p in options(docker_words(script)) if p[0] not in ("--label", "--name")]
    assert got == [
        ("-d", ""), ("--gpus", '"device=1"'), ("--ipc=host", ""), ("--restart", "unless-stopped"),
        ("--log-driver", "json-file"), ("--log-opt", "max-size=100m"), ("--log-opt", "max-file=5"),
        ("--network", "host"), ("-v", "/home/u/.pdctl/x/unit:/pdctl/unit"),
        ("-v", "/usr/local/vgpu/libvgpu.so:/usr/local/vgpu/libvgpu.so:ro"),
        ("-v", "/tmp/vgpulock:/tmp/vgpulock"),
        ("-v", "/home/u/.cache/huggingface:/root/.cache/huggingface"),
        ("--device", "/dev/infiniband"), ("--cap-add", "IPC_LOCK"), ("--ulimit", "memlock=-1"),
        ("--env", "CUDA_DEVICE_MEMORY_LIMIT=71885m"),
        ("--env", "CUDA_DEVICE_MEMORY_SHARED_CACHE=/pdctl/unit/vgpu.cache"),
        ("--env", "LD_PRELOAD=/usr/local/vgpu/libvgpu.so"), ("--env", "UCX_TLS=cuda_copy,tcp"),
        ("--env", "VLLM_HOST_IP=192.0.2.10"), ("--env", "VLLM_NIXL_SIDE_CHANNEL_HOST=192.0.2.10"),
        ("--env", "VLLM_NIXL_SIDE_CHANNEL_PORT=5602"),
    ]
    words = docker_words(script)
    # The engine listens on the spec's port itself: no mapping, the port in its arguments.
    assert "-p" not in words and words[words.index("--port") + 1] == "8201"
    # start.sh checks the library, makes the lock folder and drops the stale cache first.
    before = script[: script.index("docker run -d")]
    assert "if [ ! -r /usr/local/vgpu/libvgpu.so ]; then" in before
    assert "mkdir -p /tmp/vgpulock" in before
    assert 'rm -f "$HOME"/.pdctl/qwen-hami-docker/qwen-hami-docker-decode-1/vgpu.cache' in before
    assert "pip install" not in script  # the image carries NIXL; nothing is installed on the host


def test_prefill_has_no_slice_and_the_plans_ports_are_the_spec_ports() -> None:
    plan = plan_of(HAMI_DOCKER)
    words = docker_words(start_script(plan, "qwen-hami-docker-prefill-0"))
    assert "LD_PRELOAD=/usr/local/vgpu/libvgpu.so" not in words
    assert not any(w.endswith(":/usr/local/vgpu/libvgpu.so:ro") for w in words)
    assert ("--network", "host") in options(words)
    units = {u.name: u for u in plan.units}
    rules = {(r.ports, r.purpose) for r in plan.ports}
    for inst in plan.instances:
        assert units[inst.name].publish == ()
        assert units[inst.name].port == inst.port  # the health probe's port
        assert (str(inst.port), f"{inst.name} HTTP (vLLM API)") in rules
    assert units["qwen-hami-docker-router"].image is None  # the router stays a process


def test_paths_reaching_the_shell_are_quoted(tmp_path: Path) -> None:
    library = "/opt/it's-$(touch${IFS}pwned)/libvgpu.so"

    def change(doc: dict) -> None:
        doc["decode"]["share"]["library"] = library
        doc["hosts"][0]["dataDir"] = "/srv/pd data"

    script = start_script(plan_of(HAMI_DOCKER, change), "qwen-hami-docker-decode-0")
    words = docker_words(script.replace('"$unit_dir"', shlex.quote("/srv/pd data/u")))
    assert f"{library}:/usr/local/vgpu/libvgpu.so:ro" in words
    assert "CUDA_DEVICE_MEMORY_SHARED_CACHE=/pdctl/unit/vgpu.cache" in words
    assert "/srv/pd data/u:/pdctl/unit" in words
    subprocess.run(["bash", "-n"], input=script.encode(), check=True)


def test_mooncake_store_file_is_read_through_the_unit_mount() -> None:
    def change(doc: dict) -> None:
        for h in doc["hosts"]:
            h["runtime"] = "docker"
            h["rdmaDevices"] = ["mlx5_0"]
        doc["disaggregation"]["store"] = {"enabled": True}

    plan = plan_of(RDMA, change)
    words = docker_words(start_script(plan, "llama70b-mooncake-prefill-0"))
    assert "MOONCAKE_CONFIG_PATH=/pdctl/unit/mooncake.json" in words
    assert ("--device", "/dev/infiniband") in options(words)
    rendered = render(plan)
    assert any(a.path.endswith("llama70b-mooncake-prefill-0/mooncake.json") for a in rendered)


def test_mooncake_rdma_in_a_container_needs_the_hosts_rdma_devices() -> None:
    def change(doc: dict) -> None:
        doc["hosts"][1]["runtime"] = "docker"
        doc["hosts"][1].pop("rdmaDevices")

    with pytest.raises(SpecError) as err:
        plan_of(RDMA, change)
    assert err.value.path == "hosts[1].rdmaDevices"
    assert "/dev/infiniband" in (err.value.fix or "")


def on_docker(**host):  # type: ignore[no-untyped-def]
    """A change putting every host of a spec on runtime docker (with `host`'s fields)."""

    def change(doc: dict) -> None:
        for h in doc["hosts"]:
            h.update(runtime="docker", **host)
            for key in ("venv", "condaEnv"):
                h.pop(key, None)

    return change


def test_tcp_nixl_on_docker_hosts_renders_without_rdma_flags() -> None:
    def change(doc: dict) -> None:
        for h in doc["hosts"]:
            h["runtime"] = "docker"
            h.pop("venv", None)
            h.pop("condaEnv", None)
            h.pop("rdmaDevices", None)  # a host without RDMA

    plan = plan_of(NIXL, change)
    for inst in plan.instances:
        pairs = options(docker_words(start_script(plan, inst.name)))
        assert ("--network", "host") in pairs
        assert not any(f in ("--device", "--cap-add", "--ulimit", "-p") for f, _ in pairs)


def test_a_multinode_group_on_docker_hosts_runs_on_the_host_network() -> None:
    plan = plan_of(MULTINODE, on_docker())
    leader, *workers = [u for u in plan.units if u.role == "serve"]
    assert workers and all(u.publish == () for u in (leader, *workers))
    assert workers[0].leader == leader.name  # health is the leader's
    for unit in (leader, *workers):
        words = docker_words(start_script(plan, unit.name))
        assert ("--network", "host") in options(words)
        assert words[words.index("--port") + 1] == str(unit.port)
    rendezvous = [r for r in plan.ports if "rendezvous" in r.purpose]
    assert rendezvous


def lora_pinned(tmp: Path) -> Path:
    """examples/phase0-docker.yaml serving one adapter pinned at a revision."""
    doc = yaml.safe_load((ROOT / "examples/phase0-docker.yaml").read_text())
    doc["model"]["lora"] = {
        "adapters": [{"name": "support", "hf": "example-org/support-lora", "revision": "5d4c0f1"}]
    }
    path = written(tmp / "lora-pinned.yaml", yaml.safe_dump(doc))
    return path


LORA_PINNED = Path("lora-pinned")  # made by lora_pinned() in the test's folder


@pytest.mark.parametrize(
    ("path", "phrases"),
    [
        # --docker-url would wait for /health on a headless node's port (it has none)
        (MULTINODE, ("llama405b-serve-0 spans 2 hosts", "over SSH")),
        # the docker SDK starts containers only; the router of phase 2 is a process
        (NIXL, ("qwen-nixl-router (router) on host", "is a process, not a container")),
        # an adapter pinned at a revision is fetched by start.sh, which the SDK path skips
        (LORA_PINNED, ("adapter support is fetched at its revision by start.sh", "a path")),
    ],
    ids=["multinode", "process", "fetched-adapter"],
)
def test_the_sdk_path_refuses_what_it_cannot_start_before_connecting(
    path: Path, phrases: tuple[str, ...], tmp_path: Path, capsys
) -> None:
    """Refused with one line naming the unit, before any Docker host is contacted (the URLs
    point at nothing)."""

    if path == LORA_PINNED:
        path = lora_pinned(tmp_path)
    doc = yaml.safe_load(path.read_text())
    on_docker()(doc)
    doc.pop("secrets", None)
    spec = written(tmp_path / "spec.yaml", yaml.safe_dump(doc))
    urls = [f"--docker-url={h['name']}=unix://{tmp_path}/none.sock" for h in doc["hosts"]]
    _out, err = cli(["up", str(spec), "--yes", *urls], 2)
    # one error line (a spec warning, such as the replicas hint, may come before it)
    lines = [ln for ln in err.strip().splitlines() if ": warning: " not in ln]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(phrase in err for phrase in phrases), err


SAME_CONTAINER = {
    "phase0-docker": (ROOT / "examples/phase0-docker.yaml", None),
    "phase0-docker-host-network": (
        ROOT / "examples/phase0-docker.yaml",
        on_docker(network="host", restart="on-failure:3", logMaxSize="1g", logMaxFiles=9),
    ),
    "phase3-hami-docker": (HAMI_DOCKER, None),
    "phase2-nixl-docker": (NIXL, on_docker()),
    "phase2-mooncake-rdma-docker": (RDMA, on_docker(rdmaDevices=["mlx5_0"])),
    "phase0-multinode-docker": (MULTINODE, on_docker()),
    # adapters: the fetched folder and a host path mounted read-only into the engines
    "phase2-lora-docker": (ROOT / "examples/phase2-lora-hosts.yaml", on_docker()),
}


SDK_KEYS = {
    *("image", "command", "name", "labels", "environment", "ipc_mode", "restart_policy"),
    *("log_config", "volumes", "network_mode", "ports", "device_requests", "devices"),
    *("cap_add", "ulimits", "entrypoint"),
}


def sdk_options(kw: dict, secrets: dict[str, str]) -> list[tuple[str, str]]:
    """The docker SDK's `containers.create` arguments as the `docker run` options that ask
    for the same (the docker CLI's own spelling), for comparing with start.sh's."""
    restart, log = kw["restart_policy"], kw["log_config"]
    retries = restart["MaximumRetryCount"]
    out = [("-d", ""), ("--name", kw["name"]), ("--log-driver", log["Type"])]
    assert set(kw) <= SDK_KEYS, set(kw) - SDK_KEYS  # a new argument must be compared here
    out += [("--ipc=host", "")] if kw["ipc_mode"] == "host" else []
    out += [("--restart", restart["Name"] + (f":{retries}" if retries else ""))]
    out += [("--log-opt", f"{k}={v}") for k, v in log["Config"].items()]
    out += [("--label", f"{k}={v}") for k, v in kw["labels"].items()]
    out += [("--network", kw["network_mode"])] if "network_mode" in kw else []
    out += [("-p", f"{h}:{c.removesuffix('/tcp')}") for c, h in kw.get("ports", {}).items()]
    for source, v in kw["volumes"].items():
        out += [("-v", f"{source}:{v['bind']}" + (":ro" if v["mode"] == "ro" else ""))]
    for k, v in kw["environment"].items():
        out += [("--env", k if secrets.get(k) == v else f"{k}={v}")]
    for r in kw.get("device_requests", []):
        assert r["Capabilities"] == [["gpu"]] and not r["Count"] and not r["Driver"]
        out += [("--gpus", f'"device={",".join(r["DeviceIDs"])}"')]
    out += [("--device", d.removesuffix(":rwm").split(":")[0]) for d in kw.get("devices", [])]
    out += [("--cap-add", c) for c in kw.get("cap_add", [])]
    out += [("--ulimit", f"{u['Name']}={u['Soft']}") for u in kw.get("ulimits", [])]
    out += [("--entrypoint", e) for e in kw.get("entrypoint", [])]  # a group node's guard
    assert all(u["Soft"] == u["Hard"] for u in kw.get("ulimits", []))
    return sorted(out)


@pytest.mark.parametrize("case", SAME_CONTAINER, ids=str)
def test_the_script_and_the_sdk_start_the_same_container(case: str) -> None:
    """For each container unit of each docker spec: the words start.sh gives `docker run` and
    the keyword arguments the docker SDK target gives `containers.create` (both from the
    bundle's one definition, render/container.py) describe the same container: name, image,
    args, labels and hash, environment with secrets, mounts, GPUs, devices, capabilities,
    ulimits, network, ports, IPC, restart policy and log options."""
    from pdctl.targets.docker.engine import create_kwargs, host_path

    path, change = SAME_CONTAINER[case]
    plan = plan_of(path, change)
    bundle = render(plan)
    secrets = {s.name: f"secret-{s.name}" for s in plan.secrets}
    home = "/home/u"
    containers = [u for u in bundle.units if u.container is not None]
    assert containers, case
    for rendered in containers:
        c = rendered.container
        assert c is not None and c.hash == rendered.hash
        unit_dir = host_path(c.unit_dir, home, "unit folder")
        script = rendered.start.text
        container = shlex.split(next(x for x in script.splitlines() if x[:10] == "container="))
        env = {**secrets, "HOME": home, "unit_dir": unit_dir, "container": container[0][10:]}
        words = docker_words(script, env)
        pairs = options(words)
        kw = create_kwargs(c, secrets, home)
        assert sorted(pairs) == sdk_options(kw, secrets), rendered.unit.name
        assert words[2 * len(pairs) - sum(v == "" for _, v in pairs) :] == [c.image, *c.args]
        assert (kw["image"], kw["command"]) == (c.image, list(c.args))
        assert kw["labels"]["pdctl.io/hash"] == rendered.hash
