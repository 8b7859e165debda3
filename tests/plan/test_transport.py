"""KV transfer paths that work on real networks (issue 22): P2pNccl's request ids, RDMA as a
spec concept (hosts[].rdmaDevices, kubernetes.rdma), TCP-capable transports where there is
no RDMA, RDMA-only settings refused or warned in one located line, the llm-d engine label."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from pdctl.errors import SpecError
from pdctl.render import render
from tests.conftest import ROOT
from tests.helpers import plan_of, run_cli, written
from tests.render.check import check_transports, engine_pods, rdma_resources, ucx_over_tcp

EXAMPLES = ROOT / "examples"
RDMA_ONLY = "rc,ud,sm,self,cuda_copy,cuda_ipc"


def example(name: str) -> dict:
    return yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())


def docs(d: dict, **kw) -> list[dict]:
    bundle = render(plan_of(d, **kw))
    return [o for o in yaml.safe_load_all(bundle.stream()) if o]


def refusal(d: dict, **kw) -> SpecError:
    with pytest.raises(SpecError) as err:
        plan_of(d, **kw)
    return err.value


# 1. P2pNccl: vLLM >= 0.14 randomises request ids per engine (vllm#42839) -------------------
def p2p_specs() -> list[dict]:
    conda = example("phase2-p2p-nccl")
    docker = copy.deepcopy(conda)
    docker["hosts"][0]["runtime"] = "docker"
    two = copy.deepcopy(conda)
    two["hosts"].append({"name": "gpu-b", "address": "192.0.2.11", "gpus": [0, 1]})
    two["decode"]["hosts"] = ["gpu-b"]
    return [conda, docker, two]


@pytest.mark.parametrize("d", p2p_specs(), ids=["conda", "docker", "two-hosts"])
def test_every_p2p_nccl_engine_keeps_the_routers_request_id(d: dict) -> None:
    plan = plan_of(d)
    engines = [i for i in plan.instances if i.role in ("prefill", "decode")]
    assert engines
    for inst in engines:
        assert dict(inst.env)["VLLM_DISABLE_REQUEST_ID_RANDOMIZATION"] == "1", inst.name
    bundle = render(plan)
    for unit in bundle.units:
        if unit.unit.role not in ("prefill", "decode"):
            continue
        (start,) = [f.text for f in unit.files if f.path.endswith("start.sh")]
        docker = unit.unit.image is not None
        line = (
            "--env VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=1"
            if docker
            else ("export VLLM_DISABLE_REQUEST_ID_RANDOMIZATION=1")
        )
        assert line in start, unit.unit.name


def test_other_connectors_leave_request_ids_alone() -> None:
    for name in ("phase2-nixl-hosts", "phase2-mooncake-tcp"):
        plan = plan_of(EXAMPLES / f"{name}.yaml")
        for inst in plan.instances:
            assert "VLLM_DISABLE_REQUEST_ID_RANDOMIZATION" not in dict(inst.env)


def test_the_variable_is_pdctls_for_p2p_nccl() -> None:
    d = example("phase2-p2p-nccl")
    d["engine"]["env"] = {"VLLM_DISABLE_REQUEST_ID_RANDOMIZATION": "0"}
    err = refusal(d)
    assert err.path == "engine.env.VLLM_DISABLE_REQUEST_ID_RANDOMIZATION"
    assert "p2p-nccl" in err.fix


# 2./3. NIXL on Kubernetes: RDMA when the spec asks for it, TCP when it does not --------------
@pytest.mark.parametrize("name", ["phase2-nixl-hosts", "phase2-wide-ep"])
def test_rdma_examples_render_rdma_resources_ipc_lock_and_hca_env(name: str) -> None:
    objs = docs(example(name), target="kubernetes")
    pods = engine_pods(objs)
    assert pods and check_transports(objs) == len(pods)
    for pod_name, _, pod in pods:
        (vllm,) = [c for c in pod["containers"] if c["name"] == "vllm"]
        assert rdma_resources(vllm) == {"rdma/ib": "1"}, pod_name
        assert vllm["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["IPC_LOCK"]}
        env = {e["name"]: e.get("value") for e in vllm["env"]}
        assert env["UCX_TLS"] == RDMA_ONLY  # the spec's RDMA UCX, valid where RDMA is
        assert env["NCCL_IB_HCA"].startswith("mlx5_0")
        if name == "phase2-wide-ep":  # expert parallel: DeepEP's NVSHMEM gets the HCAs too
            assert env["NVSHMEM_HCA_LIST"] == "mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1"
        else:
            assert "NVSHMEM_HCA_LIST" not in env


@pytest.mark.parametrize("name", ["phase2-nixl-hosts", "phase2-wide-ep"])
def test_without_rdma_an_rdma_only_ucx_is_refused_in_one_located_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    d = example(name)
    del d["kubernetes"]["rdma"]
    err = refusal(d, target="kubernetes")
    assert err.path == "engine.env.UCX_TLS"
    assert "no RDMA" in err.message and "tcp" in err.fix
    spec = written(tmp_path / "spec.yaml", yaml.safe_dump(d))
    code, out, err_text = run_cli(["render", str(spec), "--target", "kubernetes"], capsys)
    assert code == 2 and out == ""
    (line,) = err_text.splitlines()
    assert line.startswith(f"error: {spec}:") and "engine.env.UCX_TLS" in line


@pytest.mark.parametrize("name", ["phase2-nixl-hosts", "phase2-wide-ep"])
def test_without_rdma_a_tcp_capable_ucx_renders_no_capability(name: str) -> None:
    d = example(name)
    del d["kubernetes"]["rdma"]
    d["engine"]["env"] = {"UCX_TLS": "tcp,sm,self,cuda_copy,cuda_ipc"}
    objs = docs(d, target="kubernetes")
    assert engine_pods(objs) and check_transports(objs) == 0
    for _, _, pod in engine_pods(objs):
        (vllm,) = [c for c in pod["containers"] if c["name"] == "vllm"]
        env = {e["name"]: e.get("value") for e in vllm["env"]}
        assert ucx_over_tcp(env) and "NCCL_IB_HCA" not in env


def test_one_role_without_rdma_is_refused_at_its_own_setting() -> None:
    d = example("phase2-nixl-hosts")
    d["decode"] = {**d["decode"], "kubernetes": {"rdma": None}}
    err = refusal(d, target="kubernetes")
    assert err.path == "engine.env.UCX_TLS" and "decode pods" in err.message
    d["decode"]["env"] = {"UCX_NET_DEVICES": "mlx5_0:1"}
    d["engine"]["env"] = {"UCX_TLS": "tcp,cuda_copy"}
    err = refusal(d, target="kubernetes")
    assert err.path == "decode.env.UCX_NET_DEVICES"


def test_deepep_across_nodes_needs_rdma_on_kubernetes() -> None:
    d = example("phase2-wide-ep")
    del d["kubernetes"]["rdma"]
    d["engine"]["env"] = {}
    d["decode"]["extraArgs"] = ["--all2all-backend", "deepep_low_latency"]
    err = refusal(d, target="kubernetes")
    assert err.path == "decode.extraArgs[0]" and "DeepEP" in err.message
    d["kubernetes"]["rdma"] = {"resources": {"rdma/ib": 1}}
    assert check_transports(docs(d, target="kubernetes")) == 4  # 2 LWS x leader + worker


def test_multus_networks_and_per_role_resources() -> None:
    d = example("phase2-llmd")
    d["kubernetes"]["rdma"] = {"resources": {"rdma/hca_shared_devices_a": 1}}
    d["decode"]["kubernetes"]["rdma"] = {
        "resources": {"nvidia.com/hostdev": 2}, "networks": ["rdma-net", "net-ns/sriov-ib@net1"],
    }
    objs = docs(d)
    by_role = {name.rsplit("-", 1)[1]: (meta, pod) for name, meta, pod in engine_pods(objs)}
    meta, pod = by_role["decode"]
    (vllm,) = pod["containers"]
    # maps merge: the role's resource joins the section's
    assert rdma_resources(vllm) == {"nvidia.com/hostdev": "2", "rdma/hca_shared_devices_a": "1"}
    assert meta["annotations"]["k8s.v1.cni.cncf.io/networks"] == "rdma-net,net-ns/sriov-ib@net1"
    meta, pod = by_role["prefill"]
    assert "k8s.v1.cni.cncf.io/networks" not in meta.get("annotations", {})
    assert check_transports(objs) == 2
    epp = next(
        o for o in objs if o["metadata"]["name"].endswith("-epp") and o["kind"] == "Deployment"
    )
    (c,) = epp["spec"]["template"]["spec"]["containers"]
    assert "add" not in c["securityContext"]["capabilities"]
    assert not any(k.startswith("rdma/") for k in c["resources"]["limits"])


@pytest.mark.parametrize(
    ("rdma", "where", "what"),
    [
        ({}, "kubernetes.rdma", "no RDMA device"),
        ({"resources": {"nvidia.com/gpu": 1}}, "kubernetes.rdma.resources", "pdctl sets"),
        ({"resources": {"ib": 1}}, "kubernetes.rdma.resources", "extended resource"),
        ({"resources": {"rdma/ib": 0}}, "kubernetes.rdma", "1..64"),
        ({"networks": ["Bad Name"]}, "kubernetes.rdma.networks", "NetworkAttachmentDefinition"),
        ({"resources": {"rdma/ib": 1}, "devices": ["mlx5 0"]}, "kubernetes.rdma.devices", "RDMA"),
    ],
)
def test_bad_rdma_sections_are_one_located_error(rdma: dict, where: str, what: str) -> None:
    d = example("phase2-llmd")
    d["kubernetes"]["rdma"] = rdma
    with pytest.raises(SpecError) as err:
        plan_of(d)
    assert err.value.path.startswith(where) and what in str(err.value)
    assert err.value.line_no is not None


def test_rdma_belongs_to_engine_pods_and_its_annotation_to_pdctl() -> None:
    d = example("phase2-llmd")
    d["router"]["kubernetes"] = {"rdma": {"resources": {"rdma/ib": 1}}}
    assert refusal(d).path == "router.kubernetes.rdma"
    d = example("phase2-llmd")
    d["kubernetes"]["rdma"] = {"networks": ["rdma-net"]}
    d["kubernetes"]["podAnnotations"] = {"k8s.v1.cni.cncf.io/networks": "other"}
    assert refusal(d).path == "kubernetes.podAnnotations"


def test_phase1_pods_take_rdma_too() -> None:
    d = example("phase1-lws")
    d["kubernetes"]["rdma"] = {"resources": {"rdma/ib": 1}, "devices": ["mlx5_0", "mlx5_1"]}
    objs = docs(d)
    lws = next(o for o in objs if o["kind"] == "LeaderWorkerSet")
    for key in ("leaderTemplate", "workerTemplate"):
        (c,) = lws["spec"]["leaderWorkerTemplate"][key]["spec"]["containers"]
        assert c["resources"]["limits"]["rdma/ib"] == "1"
        assert c["securityContext"]["capabilities"]["add"] == ["IPC_LOCK"]
        assert {"name": "NCCL_IB_HCA", "value": "mlx5_0,mlx5_1"} in c["env"]


# Hosts: refused for containers (no /dev/infiniband), warned (--strict refuses) elsewhere ------
def two_hosts(runtime: str = "conda", rdma: bool = False) -> dict:
    hosts = [
        {"name": f"gpu-{c}", "address": f"192.0.2.1{i}", "gpus": [0], "runtime": runtime}
        for i, c in enumerate("ab")
    ]
    if rdma:
        for h in hosts:
            h["rdmaDevices"] = ["mlx5_0"]
    return {
        "name": "kv", "phase": 2, "model": {"name": "Qwen/Qwen3-8B"},
        "engine": {"env": {"UCX_TLS": RDMA_ONLY}}, "hosts": hosts, "prefill": {"hosts": ["gpu-a"]},
        "decode": {"hosts": ["gpu-b"]}, "disaggregation": {"connector": "nixl"},
    }


def test_rdma_only_ucx_between_hosts_without_rdma_devices_is_a_located_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = written(tmp_path / "spec.yaml", yaml.safe_dump(two_hosts()))
    line_no = spec.read_text().splitlines().index(f"    UCX_TLS: {RDMA_ONLY}") + 1
    code, _, err = run_cli(["validate", str(spec)], capsys)
    assert code == 0
    (warning,) = [w for w in err.splitlines() if "warning" in w]
    assert warning.startswith(f"{spec}:{line_no}: warning: engine.env.UCX_TLS: ")
    assert "gpu-a, gpu-b list no rdmaDevices" in warning and "hosts[0, 1].rdmaDevices" in warning
    for cmd in ("validate", "render"):
        code, out, err = run_cli([cmd, str(spec), "--strict"], capsys)
        assert code == 1 and out == ""
        assert "refused (--strict): a setting may not work where it runs" in err


def test_rdma_devices_or_one_host_need_no_warning() -> None:
    assert plan_of(two_hosts(rdma=True)).cautions == ()
    one = two_hosts()
    one["hosts"][0]["gpus"] = [0, 1]
    one["hosts"] = one["hosts"][:1]
    one["decode"]["hosts"] = ["gpu-a"]
    assert plan_of(one).cautions == ()  # KV stays on the host


def test_rdma_only_ucx_in_containers_without_rdma_devices_is_refused() -> None:
    err = refusal(two_hosts("docker"))
    assert err.path == "engine.env.UCX_TLS"
    assert "runtime docker hosts gpu-a, gpu-b list no rdmaDevices" in err.message
    assert plan_of(two_hosts("docker", rdma=True)).cautions == ()


def test_mooncake_over_rdma_on_a_host_without_rdma_devices_is_warned() -> None:
    d = example("phase2-mooncake-rdma")
    assert plan_of(d).cautions == ()
    for h in d["hosts"]:
        del h["rdmaDevices"]
    (caution,) = plan_of(d).cautions
    assert caution.path == "disaggregation.protocol" and "Mooncake over RDMA" in caution.message


# 4. `pdctl init --phase 2` moves KV over TCP wherever it renders ---------------------------
def test_init_phase2_spec_moves_kv_without_rdma() -> None:
    text = (ROOT / "templates" / "init-phase2.yaml").read_text()
    assert "(not docker)" not in text
    d = yaml.safe_load(text)
    assert ucx_over_tcp(d["engine"].get("env", {}))
    assert plan_of(text).cautions == ()
    for phase in (2, 3):
        check_transports(docs(d, phase=phase, target="kubernetes"))
    docker = copy.deepcopy(d)
    for h in docker["hosts"]:
        h["runtime"] = "docker"
    assert plan_of(docker).cautions == ()


# 6. The engine-type label llm-d-router reads --------------------------------------------------
def test_engine_pods_carry_llm_d_engine_type_label() -> None:
    objs = docs(example("phase2-llmd"))
    for _, meta, _ in engine_pods(objs):
        assert meta["labels"]["llm-d.ai/engine-type"] == "vllm"
        assert "inference.networking.k8s.io/engine-type" not in meta["labels"]


def test_wide_ep_on_hosts_gives_nvshmem_the_hosts_hcas_and_checks_deepep() -> None:
    d = example("phase2-wide-ep")
    plan = plan_of(d)
    nodes = [n for inst in plan.instances for n in (inst, *inst.workers)]
    assert len(nodes) == 4
    for node in nodes:  # expert parallel across hosts with rdmaDevices
        env = dict(node.env)
        assert env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1,mlx5_2,mlx5_3"
        assert env["NVSHMEM_HCA_LIST"] == "mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1"
    d["decode"]["extraArgs"] = ["--all2all-backend=deepep_low_latency"]
    assert plan_of(d).cautions == ()
    for h in d["hosts"][2:]:
        del h["rdmaDevices"]
    d["engine"]["env"] = {}
    (caution,) = plan_of(d).cautions
    assert caution.path == "decode.extraArgs[0]" and "gpu-c, gpu-d" in caution.message
    for h in d["hosts"][2:]:
        h["runtime"] = "docker"
        h.pop("venv", None)  # a docker host names no Python environment (refused since)
        h.pop("condaEnv", None)
    assert refusal(d).path == "decode.extraArgs[0]"


# 5. on hosts: a multi-node group whose leader is a name is warned (pods resolve theirs) ------
def test_a_group_led_from_a_host_name_is_warned_at_the_address() -> None:
    for name, i in (("phase0-multinode", 0), ("phase2-wide-ep", 2)):  # 2: decode's leader
        d = example(name)
        assert plan_of(d).cautions == ()
        d["hosts"][i].pop("addressForPeers", None)
        d["hosts"][i]["address"] = "gpu-leader.example"
        (caution,) = plan_of(d).cautions
        assert caution.path == f"hosts[{i}].address", name
        assert "addressForPeers" in caution.fix and "resolve names" in caution.message


def test_phase0_expert_parallel_groups_give_nvshmem_the_hosts_hcas() -> None:
    d = example("phase0-multinode")
    plan = plan_of(d)  # TP x PP: no NVSHMEM
    assert all(
        "NVSHMEM_HCA_LIST" not in dict(n.env) for i in plan.instances for n in (i, *i.workers)
    )
    d["serve"] = {"nodes": 2, "dataParallel": 16, "expertParallel": True}
    plan = plan_of(d)
    nodes = [n for i in plan.instances for n in (i, *i.workers)]
    assert len(nodes) == 2
    assert all(dict(n.env)["NVSHMEM_HCA_LIST"] == "mlx5_0:1,mlx5_1:1" for n in nodes)
