"""Every phase 2/3 example renders at every target it supports, and its artifacts pass the
checks: vLLM flags and KV keys of the pinned version, vllm-router flags, shell, Kubernetes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from tests.conftest import ROOT, check_scripts
from tests.helpers import plan_of
from tests.render.check import check_engine_flags, check_kube_docs, check_router_flags

PD_EXAMPLES = sorted((ROOT / "examples").glob("phase[23]-*.yaml"))
SHAPES = {
    "phase2-p2p-nccl", "phase2-mooncake-tcp", "phase2-mooncake-rdma", "phase2-mooncake-store",
    "phase2-nixl-hosts", "phase2-llmd", "phase3-hami",
}


def variants(example: Path) -> list[dict]:
    """The spec's own phase/target, plus the other renderings its sections allow."""
    spec, _ = load_text(example.read_text(), example.name)
    out: list[dict] = [{}]
    nixl = spec.disaggregation is None or spec.disaggregation.connector == "nixl"
    # Multi-node prefill/decode groups render on hosts only (docs/multinode.md).
    groups = any(r is not None and r.nodes > 1 for r in (spec.prefill, spec.decode))
    # An adapter given as a host path cannot be mounted into pods (docs/lora.md).
    host_paths = spec.model.lora is not None and any(a.path for a in spec.model.lora.adapters)
    if spec.phase == 2 and spec.hosts and nixl and not groups and not host_paths:
        out.append({"target": "kubernetes"})
    if nixl and spec.decode is not None and spec.decode.share is not None and spec.phase == 2:
        out.append({"phase": 3})
    # Phase 3 on hosts packs decode perGpu: unpacked (phase 2) it needs more GPUs than it has.
    if spec.phase == 3 and not spec.hosts:
        out.append({"phase": 2, "target": "kubernetes"})
    return out


CASES = [(e, v) for e in PD_EXAMPLES for v in variants(e)]


def test_one_example_per_shape() -> None:
    assert {p.stem for p in PD_EXAMPLES} >= SHAPES


@pytest.mark.parametrize(
    ("example", "over"), CASES, ids=[f"{e.stem}-{v}" for e, v in CASES]
)
def test_example_renders_and_passes_checks(example: Path, over: dict, tmp_path: Path) -> None:
    plan = plan_of(example, **over)
    bundle = render(plan)
    assert bundle.stream() == render(plan_of(example, **over)).stream()  # deterministic
    check_engine_flags(plan)
    if bundle.kind == "kubernetes":
        docs = [d for d in yaml.safe_load_all(bundle.stream()) if d is not None]
        check_kube_docs(docs)
    else:
        check_router_flags(plan)
        scripts = {a.path: a.text for a in bundle if a.path.endswith(".sh")}
        assert any(p.endswith("/run.sh") for p in scripts)
        check_scripts(scripts, tmp_path)
        assert "ports.md" in bundle.paths()
        for artifact in bundle:
            if artifact.path.endswith(".sh"):
                assert artifact.executable


def test_p2p_nccl_shape() -> None:
    plan = plan_of(ROOT / "examples/phase2-p2p-nccl.yaml")
    import json

    by_name = {i.name: i for i in plan.instances}
    pre = by_name["llama-p2p-prefill-0"]
    cfg = json.loads(pre.args[pre.args.index("--kv-transfer-config") + 1])
    assert cfg["kv_connector"] == "P2pNcclConnector" and cfg["kv_role"] == "kv_producer"
    extra = cfg["kv_connector_extra_config"]
    assert extra == {
        "proxy_ip": "192.0.2.10", "proxy_port": "30001", "http_port": str(pre.port),
        "send_type": "PUT_ASYNC",
    }
    assert pre.args[pre.args.index("--port") + 1] == extra["http_port"]
    dec = by_name["llama-p2p-decode-0"]
    dcfg = json.loads(dec.args[dec.args.index("--kv-transfer-config") + 1])
    assert cfg["kv_port"] == 21001 and dcfg["kv_port"] == 21002
    assert dcfg["kv_buffer_size"] == 8_589_934_592  # 10% of gpuMemoryGib 80, in bytes (GiB)
    assert cfg["kv_buffer_size"] == 10  # PUT_ASYNC producer
    assert dict(pre.env)["CUDA_VISIBLE_DEVICES"] == "0"
    assert dict(dec.env)["CUDA_VISIBLE_DEVICES"] == "1"
    assert dict(by_name["llama-p2p-decode-1"].env)["CUDA_VISIBLE_DEVICES"] == "3"


def test_p2p_nccl_tp2_takes_a_block_of_kv_ports() -> None:
    """Rank r of an engine listens on kv_port + r: a TP 2 instance takes two ports."""
    import json

    text = (ROOT / "examples/phase2-p2p-nccl.yaml").read_text()
    text = text.replace("gpus: [0, 1, 3, 2]", "gpus: [0, 1, 2, 3, 4, 5]")
    text = text.replace("tensorParallel: 1", "tensorParallel: 2")
    plan = plan_of(text)
    ports = {
        i.name: json.loads(i.args[i.args.index("--kv-transfer-config") + 1])["kv_port"]
        for i in plan.instances
    }
    assert ports == {"llama-p2p-prefill-0": 21001, "llama-p2p-decode-0": 21003,
                     "llama-p2p-decode-1": 21005}
    assert [dict(i.env)["CUDA_VISIBLE_DEVICES"] for i in plan.instances] == ["0,1", "2,3", "4,5"]


def test_p2p_nccl_needs_equal_tensor_parallel() -> None:
    text = (ROOT / "examples/phase2-p2p-nccl.yaml").read_text()
    text = text.replace("prefill: {replicas: 1, tensorParallel: 1", "prefill: {replicas: 1, "
                        "tensorParallel: 2")
    with pytest.raises(SpecError) as err:
        plan_of(text)
    assert err.value.path == "decode.tensorParallel"
    assert "same tensorParallel on prefill (2) and decode (1)" in err.value.message
    assert "decode.tensorParallel: 2" in err.value.fix


def test_router_command_per_connector() -> None:
    from pdctl.plan.router import router_service

    p2p = router_service(plan_of(ROOT / "examples/phase2-p2p-nccl.yaml")).command
    assert "--vllm-discovery-address" in p2p and "--prefill" not in p2p
    mc = router_service(plan_of(ROOT / "examples/phase2-mooncake-tcp.yaml"))
    cmd = mc.command
    assert cmd[cmd.index("--kv-connector") + 1] == "mooncake"
    i = cmd.index("--prefill")
    assert cmd[i + 1 : i + 3] == ("http://192.0.2.10:8100", "8998")
    assert cmd[cmd.index("--health-check-interval-secs") + 1] == "3"
    assert mc.api_key and mc.health.endswith("/liveness")
    nixl = router_service(plan_of(ROOT / "examples/phase2-nixl-hosts.yaml"))
    assert nixl.command[nixl.command.index("--kv-connector") + 1] == "nixl"
    assert nixl.venv == "/opt/vllm-router" and not nixl.api_key


def test_store_wires_master_multiconnector_and_config() -> None:
    import json

    plan = plan_of(ROOT / "examples/phase2-mooncake-store.yaml")
    bundle = render(plan)
    master = bundle["hosts/gpu-a/qwen-store-mooncake-master/run.sh"]
    assert "--enable_http_metadata_server=true" in master and "--rpc_port=50051" in master
    conf = json.loads(bundle["hosts/gpu-b/qwen-store-decode-0/mooncake.json"])
    assert conf["master_server_address"] == "192.0.2.10:50051"
    assert conf["local_hostname"] == "192.0.2.11"
    start = bundle["hosts/gpu-b/qwen-store-decode-0/start.sh"]
    assert 'MOONCAKE_CONFIG_PATH="$HOME"/.pdctl/qwen-store/qwen-store-decode-0/mooncake.json' in (
        start
    )
    dec = next(i for i in plan.instances if i.name == "qwen-store-decode-0")
    cfg = json.loads(dec.args[dec.args.index("--kv-transfer-config") + 1])
    assert cfg["kv_connector"] == "MultiConnector"
    inner = [c["kv_connector"] for c in cfg["kv_connector_extra_config"]["connectors"]]
    assert inner == ["MooncakeConnector", "MooncakeStoreConnector"]
    assert bundle.paths().index("hosts/gpu-a/qwen-store-mooncake-master/start.sh") == 0
    assert bundle.paths()[-3].endswith("qwen-store-router/run.sh")
    # the router runs under pdctl's router watch, which run.sh starts from the unit folder
    assert bundle.paths()[-2].endswith("qwen-store-router/router_watch.py")
    assert "exec python3 router_watch.py --bootstrap http://192.0.2.10:8998 --bootstrap " in (
        bundle["hosts/gpu-a/qwen-store-router/run.sh"])


def test_mooncake_bootstrap_ports_distinct_per_host() -> None:
    plan = plan_of(ROOT / "examples/phase2-mooncake-tcp.yaml")
    boots = [dict(i.env).get("VLLM_MOONCAKE_BOOTSTRAP_PORT") for i in plan.instances]
    assert boots == ["8998", "8999", None, None]
    for inst in plan.instances:
        assert dict(inst.env)["VLLM_HOST_IP"] == inst.host.address
    setup = render(plan)["hosts/gpu-a/qwen-mooncake-prefill-0/start.sh"]
    assert "mooncake-transfer-engine-cuda13==" in setup  # vLLM 0.33.0 is CUDA 13


def test_ports_md_lists_every_listening_port() -> None:
    bundle = render(plan_of(ROOT / "examples/phase2-mooncake-rdma.yaml"))
    ports = bundle["ports.md"]
    for needle in ("| 8100 |", "| 8998 |", "| 8999 |", "| 8090 |", "15000-17000", "| 29000 |"):
        assert needle in ports, needle
    assert "198.51.100.11" in ports  # addressForPeers, not the SSH address
    # MooncakeConnector's ZMQ side channel: pyzmq bind_to_random_port, 49152-65535
    assert "| 32768-65535 |" in ports and "32768-60999" not in ports


def test_llmd_objects() -> None:
    bundle = render(plan_of(ROOT / "examples/phase2-llmd.yaml"))
    docs = [d for d in yaml.safe_load_all(bundle.stream()) if d]
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    pool = by[("InferencePool", "qwen-llmd")]
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["endpointPickerRef"]["name"] == "qwen-llmd-epp"
    decode = by[("Deployment", "qwen-llmd-decode")]["spec"]["template"]
    (sidecar,) = decode["spec"]["initContainers"]
    assert sidecar["restartPolicy"] == "Always"
    assert "--model-server-port=8200" in sidecar["args"]
    assert "--secure-proxy=false" in sidecar["args"]
    assert "--kv-connector=nixlv2" in sidecar["args"]
    vllm = decode["spec"]["containers"][0]
    assert vllm["args"][vllm["args"].index("--port") + 1] == "8200"
    env = {e["name"]: e for e in vllm["env"]}
    side = env["VLLM_NIXL_SIDE_CHANNEL_HOST"]
    assert side["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    pool_sel = pool["spec"]["selector"]["matchLabels"]
    for role in ("prefill", "decode"):
        labels = by[("Deployment", f"qwen-llmd-{role}")]["spec"]["template"]["metadata"]["labels"]
        assert labels["llm-d.ai/role"] == role
        assert set(pool_sel.items()) <= set(labels.items())
    config = yaml.safe_load(by[("ConfigMap", "qwen-llmd-epp")]["data"]["epp-config.yaml"])
    assert config["kind"] == "EndpointPickerConfig"
    types = {p["type"] for p in config["plugins"]}
    assert {"prefix-cache-scorer", "queue-scorer", "kv-cache-utilization-scorer"} <= types
    assert {"disagg-profile-handler", "prefill-filter", "decode-filter"} <= types
    refs = {p["pluginRef"] for prof in config["schedulingProfiles"] for p in prof["plugins"]}
    assert refs <= {p.get("name", p["type"]) for p in config["plugins"]}
    route = by[("HTTPRoute", "qwen-llmd")]
    assert route["spec"]["rules"][0]["timeouts"] == {"request": "300s"}  # llm-d chart default


def test_http_route_timeout_can_be_left_out() -> None:
    text = (ROOT / "examples/phase2-llmd.yaml").read_text()
    text = text.replace("router: {gateway: llm-d-inference-gateway}",
                        "router: {gateway: llm-d-inference-gateway, requestTimeout: null}")
    docs = [d for d in yaml.safe_load_all(render(plan_of(text, "s.yaml")).stream())
            if d]
    (route,) = [d for d in docs if d["kind"] == "HTTPRoute"]
    assert "timeouts" not in route["spec"]["rules"][0]
    check_kube_docs(docs)
    bad = text.replace("requestTimeout: null", "requestTimeout: 5min")
    with pytest.raises(SpecError) as err:
        load_text(bad, "s.yaml")
    assert err.value.path == "router.requestTimeout"


def test_phase3_decode_is_a_hami_slice() -> None:
    bundle = render(plan_of(ROOT / "examples/phase3-hami.yaml"))
    docs = [d for d in yaml.safe_load_all(bundle.stream()) if d]
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    dec = by[("Deployment", "qwen-hami-decode")]["spec"]["template"]
    assert dec["spec"]["schedulerName"] == "hami-scheduler"
    assert dec["metadata"]["annotations"] == {
        "hami.io/gpu-scheduler-policy": "binpack", "nvidia.com/use-gputype": "H200",
    }
    limits = dec["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "1"
    assert limits["nvidia.com/gpumem-percentage"] == "50"
    assert limits["nvidia.com/gpucores"] == "50"
    args = dec["spec"]["containers"][0]["args"]
    # (71885 - 2304) / 71885 = 0.968, capped at 0.95
    assert args[args.index("--gpu-memory-utilization") + 1] == "0.95"
    pre = by[("Deployment", "qwen-hami-prefill")]["spec"]["template"]["spec"]
    assert pre["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert "initContainers" not in pre


@pytest.mark.parametrize("phase", [2, 3])
def test_init_specs_render(phase: int, tmp_path: Path) -> None:
    text = (ROOT / "templates" / f"init-phase{phase}.yaml").read_text()
    spec, _ = load_text(text, f"init-phase{phase}.yaml")
    wheres = (
        [{}, {"phase": 3}]
        if phase == 3
        else [{}, {"target": "kubernetes"}, {"phase": 3, "target": "kubernetes"}]
    )
    for over in wheres:
        plan = make_plan(spec, **over)
        bundle = render(plan)
        check_engine_flags(plan)
        if bundle.kind == "kubernetes":
            check_kube_docs([d for d in yaml.safe_load_all(bundle.stream()) if d])
        else:
            check_router_flags(plan)
            check_scripts({a.path: a.text for a in bundle if a.path.endswith(".sh")}, tmp_path)
