"""Impossible PD combinations: one line on stderr, exit 2, the field at fault, a fix."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from tests.conftest import ROOT
from tests.helpers import at, written
from tests.helpers import pdctl as cli

P2P = ROOT / "examples/phase2-p2p-nccl.yaml"
HAMI = ROOT / "examples/phase3-hami.yaml"


def edited(example: Path, tmp: Path, change) -> Path:
    doc = yaml.safe_load(example.read_text())
    change(doc)
    path = written(tmp / "spec.yaml", yaml.safe_dump(doc, sort_keys=False))
    return path


def one_line_error(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def test_p2p_nccl_with_vllm_0_33_is_refused(tmp_path: Path) -> None:
    spec = edited(P2P, tmp_path, lambda d: d["engine"].update(version="0.33.0"))
    line = one_line_error(cli("render", str(spec)))
    assert line.endswith(
        "disaggregation.connector: P2pNcclConnector was removed in vLLM 0.24.0; pin "
        "engine.version <= 0.23.0 or use connector nixl or mooncake"
    )
    assert "spec.yaml:" in line


def test_tp2_on_a_hami_slice_needs_opt_in(tmp_path: Path) -> None:
    spec = edited(HAMI, tmp_path, lambda d: d["decode"].update(tensorParallel=2))
    line = one_line_error(cli("render", str(spec)))
    assert "decode.tensorParallel: tensorParallel 2 on HAMi slices" in line
    assert "allowTensorParallel" in line

    def opt_in(d):
        d["decode"].update(tensorParallel=2)
        d["decode"]["share"]["allowTensorParallel"] = True

    ok = cli("render", str(edited(HAMI, tmp_path, opt_in)))
    assert ok.returncode == 0, ok.stderr
    assert "--disable-custom-all-reduce" in ok.stdout
    assert "nvidia.com/gpu: '2'" in ok.stdout


def _spec(tmp_path: Path, example: Path, change) -> object:
    path = edited(example, tmp_path, change)
    return load_text(path.read_text(), "spec.yaml")[0]


@pytest.mark.parametrize(
    ("example", "change", "path", "words"),
    [
        (P2P, lambda d: d["router"].update(host="nope"), "router.host", "no host named"),
        (P2P, lambda d: d["router"].update(port=8100), "router.port", "port 8100"),
        (P2P, lambda d: d["engine"].update(device="cpu"), "disaggregation.connector", "CUDA"),
        (P2P, lambda d: d.pop("decode"), "decode", "needs a `decode` section"),
        (P2P, lambda d: d["decode"].update(extraArgs=["--max-num-seqs", "8", "--port=9"]),
         "decode.extraArgs[2]", "set by pdctl"),
        (HAMI, lambda d: d["decode"]["share"].update(gpuCoresPercent=60), "decode.share."
         "gpuCoresPercent", "60%"),
        (HAMI, lambda d: d["decode"]["share"].update(gpuMemoryPercent=None, gpuMemoryMib=80000),
         "decode.share.gpuMemoryMib", "160000 MiB"),
        (HAMI, lambda d: d["decode"]["share"].update(
            gpuMemoryPercent=None, gpuMemoryMib=2048, enforceEager=False),
         "decode.share", "less than half"),
        (HAMI, lambda d: d["decode"].pop("share"), "decode.share", "needs a `share`"),
        (HAMI, lambda d: d["decode"]["share"].update(perGpu=3),
         "decode.share.gpuMemoryPercent", "3 slices of 50% need 150%"),
    ],
)
def test_spec_errors_name_the_field(tmp_path, example, change, path, words) -> None:
    spec = _spec(tmp_path, example, change)
    with pytest.raises(SpecError) as err:
        render(make_plan(spec))
    assert err.value.path == path, err.value.line()
    assert words in err.value.message
    assert err.value.fix


def test_kubernetes_target_needs_nixl(tmp_path: Path) -> None:
    line = one_line_error(cli("render", str(P2P), "--target", "kubernetes"))
    assert "disaggregation.connector:" in line and "--target hosts" in line


NIXL = ROOT / "examples/phase2-nixl-hosts.yaml"


@pytest.mark.parametrize(
    ("example", "change", "where"),
    [
        (NIXL, lambda d: d["disaggregation"].update(store={"enabled": True}),
         "disaggregation.store.enabled: store.enabled needs connector mooncake"),
        (NIXL, lambda d: d.update(disaggregation={"store": {"enabled": True}}),  # no connector
         "disaggregation.store.enabled: store.enabled needs connector mooncake"),
        (NIXL, lambda d: d["disaggregation"].update(connector="mooncake", deviceName="mlx5_0"),
         "disaggregation.deviceName: deviceName applies to protocol rdma only"),
        (P2P, lambda d: d["disaggregation"].update(kvBufferDevice="cpu"),
         "disaggregation.kvBufferDevice: kvBufferDevice applies to connector nixl only"),
        (HAMI, lambda d: d["decode"]["share"].update(gpuMemoryMib=40000),
         "decode.share.gpuMemoryMib: give gpuMemoryPercent or gpuMemoryMib, not both"),
    ],
)
def test_cross_field_errors_name_the_field_and_a_fix(tmp_path, example, change, where) -> None:
    """The fields of the error; the line they make is test_p2p_nccl_with_vllm_0_33_is_refused's."""
    path, what = where.split(": ", 1)
    with pytest.raises(SpecError) as err:
        load_text(edited(example, tmp_path, change).read_text(), "spec.yaml")
    file, line, field = at(err.value)
    assert (file, field) == ("spec.yaml", path) and line, err.value
    assert err.value.message.startswith(what) and err.value.fix, err.value
