"""Phase 3 on hosts (HAMi-core without Kubernetes): placement of the slices, the environment of
each decode engine, one slice formula with Kubernetes, and the spec errors."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pdctl.errors import SpecError
from pdctl.render import render
from tests.helpers import checked, pdctl, plan_of, written

ROOT = Path(__file__).resolve().parents[2]
LIB = "/usr/local/vgpu/libvgpu.so"


def spec(share: str, connector: str = "nixl", decode: int = 3, extra: str = "") -> str:
    return (
        "name: sl\nphase: 3\nmodel: {name: Qwen/Qwen3-8B, maxModelLen: 8192}\n"
        "engine: {version: '0.33.0'}\n"
        "hosts:\n  - {name: gpu-a, address: 192.0.2.10, user: ubuntu, gpus: [0, 1, 2]}\n"
        f"prefill: {{replicas: 1}}\ndecode: {{replicas: {decode}, share: {share}{extra}}}\n"
        f"disaggregation: {{connector: {connector}}}\n"
    )


def decode_env(plan) -> dict[str, dict[str, str]]:
    return {i.name: dict(i.env) for i in plan.instances if i.role == "decode"}


def test_slices_pack_per_gpu_with_their_own_cache_and_the_slice_formula() -> None:
    share = f"{{perGpu: 2, gpuTotalMib: 143771, gpuCoresPercent: 30, library: {LIB}}}"
    plan = plan_of(spec(share))
    envs = decode_env(plan)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs.values()] == ["1", "1", "2"]
    assert {e["LD_PRELOAD"] for e in envs.values()} == {LIB}
    assert {e["CUDA_DEVICE_MEMORY_LIMIT"] for e in envs.values()} == {"71885m"}
    assert {e["CUDA_DEVICE_SM_LIMIT"] for e in envs.values()} == {"30"}
    caches = [e["CUDA_DEVICE_MEMORY_SHARED_CACHE"] for e in envs.values()]
    assert caches == [f"~/.pdctl/sl/sl-decode-{i}/vgpu.cache" for i in range(3)]
    ports = [i.port for i in plan.instances if i.role == "decode"]
    assert ports == [8200, 8201, 8202]
    assert plan.slice is not None and plan.slice.size_mib == 71885
    for inst in plan.instances:
        if inst.role == "decode":
            i = inst.args.index("--gpu-memory-utilization")
            assert float(inst.args[i + 1]) == plan.slice.gpu_memory_utilization == 0.95
        else:  # prefill keeps a whole GPU, no preload
            assert "LD_PRELOAD" not in dict(inst.env)
            assert dict(inst.env)["CUDA_VISIBLE_DEVICES"] == "0"


def test_hosts_and_kubernetes_share_one_slice_size_and_fraction() -> None:
    share = f"{{perGpu: 3, gpuMemoryMib: 40000, library: {LIB}}}"
    hosts = plan_of(spec(share))
    rwx = "kubernetes: {storage: {accessMode: ReadWriteMany}}\n"
    kube = plan_of(spec(share) + rwx, target="kubernetes")
    assert hosts.slice == kube.slice
    assert {e["CUDA_DEVICE_MEMORY_LIMIT"] for e in decode_env(hosts).values()} == {"40000m"}
    (pod,) = [
        o
        for o in render(kube).objects
        if o["kind"] == "Deployment" and o["metadata"]["name"].endswith("decode")
    ]
    container = pod["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpumem"] in (40000, "40000")
    flag = container["args"][container["args"].index("--gpu-memory-utilization") + 1]
    inst = next(i for i in hosts.instances if i.role == "decode")
    assert flag == inst.args[inst.args.index("--gpu-memory-utilization") + 1] == "0.94"


def test_start_script_checks_the_library_and_drops_the_stale_cache() -> None:
    share = f"{{perGpu: 2, gpuTotalMib: 143771, library: {LIB}}}"
    bundle = render(plan_of(spec(share, decode=2)))
    text = {a.path: a.text for a in bundle.artifacts}
    start = text["hosts/gpu-a/sl-decode-1/start.sh"]
    assert f"if [ ! -r {LIB} ]; then" in start
    assert "mkdir -p /tmp/vgpulock" in start
    assert 'rm -f "$HOME"/.pdctl/sl/sl-decode-1/vgpu.cache' in start
    assert f"export LD_PRELOAD={LIB}" in start
    # the check runs before the preload is exported (a failed preload only warns)
    assert start.index("if [ ! -r") < start.index("export LD_PRELOAD")
    assert "LD_PRELOAD" not in text["hosts/gpu-a/sl-prefill-0/start.sh"]
    for path, body in text.items():
        if path.endswith(".sh"):
            subprocess.run(["bash", "-n"], input=body, text=True, check=True)


def test_mooncake_phase3_on_hosts_keeps_its_bootstrap_and_slices_decode() -> None:
    share = f"{{perGpu: 2, gpuTotalMib: 81920, library: {LIB}}}"
    plan = plan_of(spec(share, connector="mooncake", decode=2))
    pre = next(i for i in plan.instances if i.role == "prefill")
    assert "VLLM_MOONCAKE_BOOTSTRAP_PORT" in dict(pre.env)
    assert {e["CUDA_DEVICE_MEMORY_LIMIT"] for e in decode_env(plan).values()} == {"40960m"}


@pytest.mark.parametrize(
    ("share", "extra", "path"),
    [
        ("{perGpu: 2, gpuTotalMib: 143771}", "", "decode.share.library"),
        (f"{{perGpu: 2, library: {LIB}}}", "", "decode.share.gpuTotalMib"),
        ("{perGpu: 2, gpuTotalMib: 143771, library: lib/libvgpu.so}", "", "decode.share.library"),
        (
            "{perGpu: 2, gpuTotalMib: 143771, library: '/a b/libvgpu.so'}", "",
            "decode.share.library",
        ),
        (
            f"{{perGpu: 2, gpuTotalMib: 143771, library: {LIB}}}", ", env: {LD_PRELOAD: /x.so}",
            "decode.env.LD_PRELOAD",
        ),
    ],
)
def test_spec_errors_name_the_field(share: str, extra: str, path: str, tmp_path: Path) -> None:
    text = spec(share, extra=extra)
    with pytest.raises(SpecError) as err:
        plan_of(text)
    assert err.value.path == path
    f = written(tmp_path / "sl.yaml", text)
    proc = checked(pdctl("render", str(f)), 2)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f": {path}: " in lines[0], proc.stderr
    assert proc.stdout == ""


def test_cpu_engines_have_no_gpu_to_slice() -> None:
    text = spec(f"{{perGpu: 2, gpuTotalMib: 143771, library: {LIB}}}").replace(
        "engine: {version: '0.33.0'}", "engine: {version: '0.33.0', device: cpu}"
    )
    with pytest.raises(SpecError) as err:
        plan_of(text)
    assert err.value.path == "engine.device"
