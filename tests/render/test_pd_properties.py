"""Generated PD specs: they render (at hosts, Kubernetes and phase 3) or fail with one
SpecError, and everything rendered passes the checks of the pinned versions."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from tests.helpers import written
from tests.render.check import check_engine_flags, check_kube_docs, check_router_flags


@st.composite
def shares(draw) -> dict:
    share: dict = {"perGpu": draw(st.integers(1, 4))}
    size = draw(st.sampled_from(["default", "percent", "mib"]))
    if size == "percent":
        share["gpuMemoryPercent"] = draw(st.integers(5, 100))
    elif size == "mib":
        share["gpuMemoryMib"] = draw(st.integers(2048, 90000))
    if draw(st.booleans()):
        share["gpuTotalMib"] = draw(st.sampled_from([81559, 143771]))
    if draw(st.booleans()):
        share["gpuCoresPercent"] = draw(st.integers(10, 100))
    if draw(st.booleans()):
        share["allowTensorParallel"] = True
    if draw(st.booleans()):
        share["policy"] = draw(st.sampled_from(["binpack", "spread"]))
    if draw(st.booleans()):
        share["library"] = "/usr/local/vgpu/libvgpu.so"  # phase 3 on hosts
    return share


@st.composite
def pd_specs(draw) -> dict:
    version = draw(st.sampled_from(["0.23.0", "0.33.0"]))
    connector = draw(st.sampled_from(["p2p-nccl", "mooncake", "nixl"]))
    cpu = connector == "nixl" and draw(st.booleans())
    n_hosts = draw(st.integers(1, 3))
    hosts = []
    for i in range(n_hosts):
        runtime = draw(st.sampled_from(["conda", "venv"]))
        host = {"name": f"h{i}", "address": f"10.0.0.{i + 1}", "runtime": runtime}
        if not cpu:
            host["gpus"] = list(range(2 * draw(st.integers(1, 4))))
        if draw(st.booleans()):
            host["addressForPeers"] = f"192.168.0.{i + 1}"
        hosts.append(host)
    dis: dict = {"connector": connector}
    if connector == "mooncake":
        dis["protocol"] = draw(st.sampled_from(["tcp", "rdma"]))
        if dis["protocol"] == "rdma" and draw(st.booleans()):
            dis["deviceName"] = "mlx5_0"
        if draw(st.booleans()):
            dis["store"] = {"enabled": True}
    spec: dict = {
        "name": "gen", "phase": 2,
        "model": {"name": "org/model", "maxModelLen": draw(st.sampled_from([2048, 8192]))},
        "engine": {"version": version, "device": "cpu" if cpu else "cuda"}, "hosts": hosts,
        "disaggregation": dis,
    }
    for role in ("prefill", "decode"):
        replicas = draw(st.integers(1, 3))
        spec[role] = {"replicas": replicas, "tensorParallel": draw(st.sampled_from([1, 2]))}
    spec["decode"]["share"] = draw(shares())
    if draw(st.booleans()):
        spec["secrets"] = {"apiKey": {"env": "VLLM_API_KEY"}, "hfToken": {"env": "HF_TOKEN"}}
    if draw(st.booleans()):
        spec["decode"]["enforceEager"] = True
    # The model cache on Kubernetes: the default ReadWriteOnce claim cannot hold prefill and
    # decode pods on several nodes (refused), ReadWriteMany and a per-pod emptyDir can.
    storage = draw(st.sampled_from([{}, {"accessMode": "ReadWriteMany"}, {"type": "emptyDir"}]))
    spec["kubernetes"] = {"storage": storage}
    # Transports: a UCX that does or does not reach other machines over TCP, and RDMA declared
    # for the pods (kubernetes.rdma) and hosts (rdmaDevices), or not.
    ucx = draw(st.sampled_from([None, "tcp,cuda_copy", "^tcp", RDMA_ONLY_UCX]))
    if ucx is not None:
        spec["engine"]["env"] = {"UCX_TLS": ucx}
    if draw(st.booleans()):
        rdma: dict = {"resources": {draw(st.sampled_from(RDMA_RESOURCES)): draw(st.integers(1, 2))}}
        if draw(st.booleans()):
            rdma["devices"] = ["mlx5_0", "mlx5_1"]
        if draw(st.booleans()):
            rdma["networks"] = ["sriov-ib0"]
        spec["kubernetes"]["rdma"] = rdma
    if draw(st.booleans()):
        for host in hosts:
            host["rdmaDevices"] = ["mlx5_0"]
    return spec


RDMA_ONLY_UCX = "rc,ud,sm,self,cuda_copy,cuda_ipc"
RDMA_RESOURCES = ["rdma/ib", "rdma/hca_shared_devices_a", "nvidia.com/hostdev"]


HOST_SLICE = ("engine.device", "decode.share.library", "decode.share.gpuTotalMib")


def expected_error(spec: dict, phase: int, target: str, err: SpecError) -> bool:
    dis = spec["disaggregation"]
    if err.path == "router.listen" and target == "hosts" and "secrets" in spec:
        # secrets.apiKey behind a router other hosts reach: vllm-router checks no client
        return "no client authentication" in err.message
    if dis["connector"] == "p2p-nccl" and spec["engine"]["version"] != "0.23.0":
        return err.path == "disaggregation.connector" and "removed in vLLM 0.24.0" in err.message
    if target == "kubernetes" and dis["connector"] != "nixl":
        return err.path == "disaggregation.connector"
    if target == "kubernetes" and err.path == "kubernetes.storage.accessMode":
        return spec["kubernetes"]["storage"] == {}  # 2+ pods on the default ReadWriteOnce claim
    if target == "kubernetes" and err.path == "engine.env.UCX_TLS":
        # NIXL with a UCX that cannot use TCP, in pods without RDMA
        ucx = spec["engine"].get("env", {}).get("UCX_TLS")
        return ucx in (RDMA_ONLY_UCX, "^tcp") and "rdma" not in spec["kubernetes"]
    tps = (spec["prefill"]["tensorParallel"], spec["decode"]["tensorParallel"])
    if dis["connector"] == "p2p-nccl" and tps[0] != tps[1]:
        if err.path == "decode.tensorParallel" and "same tensorParallel" in err.message:
            return True
        if phase != 3:  # phase 3 may refuse the decode TP for its slices first (below)
            return False
    share = spec["decode"]["share"]
    if phase == 3:
        # Several phase 3 rules may apply to one spec; the error must be one of those that do.
        n = share["perGpu"]
        pct = share.get("gpuMemoryPercent", 100 // n)
        mib = "gpuMemoryMib" in share or "gpuTotalMib" in share
        applies = {
            "decode.tensorParallel": spec["decode"]["tensorParallel"] > 1
            and not share.get("allowTensorParallel"),
            "decode.share.gpuMemoryPercent": "gpuMemoryMib" not in share and n * pct > 100,
            "decode.share.gpuMemoryMib": n * share.get("gpuMemoryMib", 0)
            > share.get("gpuTotalMib", 10**9),
            "decode.share.gpuCoresPercent": n * share.get("gpuCoresPercent", 0) > 100,
            "decode.share": "less than half" in err.message,
        }
        if target == "hosts":
            applies |= {
                "engine.device": spec["engine"]["device"] == "cpu",
                "decode.share.library": "library" not in share, "decode.share.gpuTotalMib": not mib,
            }
        if applies.get(err.path, False):
            return True
        if err.path in applies:
            return False
    return err.path.endswith(".replicas")  # not enough GPUs on the hosts


def check_bundle(plan, bundle) -> None:
    check_engine_flags(plan)
    if bundle.kind == "kubernetes":
        check_kube_docs([d for d in yaml.safe_load_all(bundle.stream()) if d])
        return
    check_router_flags(plan)
    with tempfile.TemporaryDirectory() as tmp:
        for artifact in bundle:
            if artifact.path.endswith(".sh"):
                path = written(Path(tmp) / artifact.path.replace("/", "_"), artifact.text)
                subprocess.run(["bash", "-n", str(path)], check=True)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    spec=pd_specs(),
    where=st.sampled_from([(2, "hosts"), (2, "kubernetes"), (3, "kubernetes"), (3, "hosts")]),
)
def test_generated_specs_render_or_fail_cleanly(spec: dict, where: tuple) -> None:
    phase, target = where
    loaded, _ = load_text(yaml.safe_dump(spec), "gen.yaml")
    try:
        plan = make_plan(loaded, phase=phase, target=target)
        bundle = render(plan)
    except SpecError as err:
        assert expected_error(spec, phase, target or "kubernetes", err), err.line()
        return
    check_bundle(plan, bundle)
    again = render(make_plan(loaded, phase=phase, target=target))
    assert [(a.path, a.text) for a in again] == [(a.path, a.text) for a in bundle]
