"""Preflight of HAMi-core's library for phase 3 on hosts, with real ELF files built by gcc: the
probe over a real sshd host (`nm -D`), the probe without binutils (pdctl reads .dynsym itself),
the checks, and the recording made on the H200 with the real HAMi-core."""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pdctl.plan import make_plan
from pdctl.preflight.facts import HOOKS, HostFacts
from pdctl.preflight.hami import elf_functions, hami_library, library_command, parse_hami_library
from pdctl.spec import load_text
from tests.helpers import written
from tests.preflight.conftest import FIX, json_findings, pdctl
from tests.preflight.sshd_hosts import sshd_hosts

HOOK_SRC = "".join(f"int {h}(void) {{ return 0; }}\n" for h in HOOKS)
OLD_CUDA = "int cuCtxCreate_v2(void) { return 0; }\n"  # compiled by HAMi-core for CUDA < 13
OTHER = "static int helper(void) { return 1; }\nint vgpu_other(void) { return helper(); }\n"


def build(tmp: Path, name: str, source: str, *flags: str) -> Path:
    if shutil.which("gcc") is None:
        pytest.skip("gcc builds the test libraries")
    src = written(tmp / f"{name}.c", source)
    out = tmp / f"{name}.so"
    subprocess.run(["gcc", "-shared", "-fPIC", *flags, "-o", str(out), str(src)], check=True)
    return out


@pytest.fixture
def libs(tmp_path: Path) -> dict[str, Path]:
    return {
        "cuda13": build(tmp_path, "cuda13", HOOK_SRC + OTHER),
        "cuda12": build(tmp_path, "cuda12", HOOK_SRC + OLD_CUDA),
        # the Release-build trap: the same code with hidden symbols exports none of them
        "hidden": build(tmp_path, "hidden", HOOK_SRC + OTHER, "-fvisibility=hidden"),
    }


def probe(path: Path, env: dict[str, str] | None = None) -> str:
    return subprocess.run(
        ["/bin/sh", "-c", library_command(str(path))], capture_output=True, text=True, check=True,
        env=env,
    ).stdout


def test_elf_reader_finds_what_nm_lists(libs: dict[str, Path]) -> None:
    names = elf_functions(libs["cuda13"].read_bytes())
    assert set(HOOKS) | {"vgpu_other"} <= set(names)
    assert "helper" not in names  # static: not exported
    nm = subprocess.run(
        ["nm", "-D", "--defined-only", str(libs["cuda13"])], capture_output=True, text=True,
        check=True,
    ).stdout
    listed = {
        p[2] for p in (line.split() for line in nm.splitlines()) if len(p) == 3 and p[1] in "TWi"
    }
    assert set(names) == listed
    assert elf_functions(libs["hidden"].read_bytes()) == ()
    with pytest.raises(ValueError):
        elf_functions(b"\x7fELF" + b"\0" * 10)
    with pytest.raises(ValueError):
        elf_functions(HOOK_SRC.encode())


def test_probe_with_nm_and_without_binutils(libs: dict[str, Path], tmp_path: Path) -> None:
    lib = parse_hami_library(probe(libs["cuda13"]))
    assert (lib.exists, lib.readable, lib.how, lib.missing_hooks) == (True, True, "nm", ())
    assert lib.cuda_headers == ">=13"
    assert parse_hami_library(probe(libs["cuda12"])).cuda_headers == "<13"
    assert parse_hami_library(probe(libs["hidden"])).missing_hooks == HOOKS
    # a PATH with no nm: the probe sends the file and pdctl reads its dynamic symbols
    bare = tmp_path / "bare-bin"
    bare.mkdir()
    for tool in ("base64", "tr"):
        (bare / tool).symlink_to(shutil.which(tool))
    text = probe(libs["cuda12"], env={"PATH": str(bare)})
    assert "base64:" in text
    lib = parse_hami_library(text)
    assert (lib.how, lib.missing_hooks, lib.cuda_headers) == ("elf", (), "<13")
    missing = parse_hami_library(probe(tmp_path / "absent.so"))
    assert (missing.exists, missing.symbols) == (False, None)
    notelf = written(tmp_path / "not-elf.so", "just text\n")
    bad = parse_hami_library(probe(notelf))
    assert bad.symbols is None and bad.error


SPEC = """\
name: sl
phase: 3
model: {{name: Qwen/Qwen3-8B, maxModelLen: 8192}}
engine: {{version: '{version}'}}
hosts:
  - {{name: {host}, address: '{address}', port: {port}, user: root, identityFile: '{key}',
     gpus: [0, 1], runtime: conda}}
prefill: {{replicas: 1}}
decode: {{replicas: 2, share: {{perGpu: 2, gpuTotalMib: 143771, library: '{library}'}}}}
disaggregation: {{connector: nixl}}
"""


def checks(library: Path, cuda: str, version: str = "0.33.0") -> list:
    spec, _ = load_text(
        SPEC.format(
            version=version, host="h", address="192.0.2.10", port=22, key="k", library=library
        ),
        "s.yaml",
    )
    plan = make_plan(spec)
    insts = [i for i in plan.instances if i.host is not None]
    facts = HostFacts(name="h", cuda=cuda, hami=parse_hami_library(probe(library)))
    return hami_library(insts[0].host, facts, plan, insts)


def test_checks_hooks_and_cuda_major(libs: dict[str, Path], tmp_path: Path) -> None:
    ok = checks(libs["cuda13"], "13.0")
    assert [(f.check, f.status) for f in ok] == [("hami.hooks", "PASS"), ("hami.cuda", "PASS")]
    (hidden,) = checks(libs["hidden"], "13.0")
    assert (hidden.check, hidden.status) == ("hami.hooks", "FAIL")
    assert "exports none of cuMemAlloc_v2, cuMemGetInfo_v2, cuGetProcAddress" in hidden.found
    _, old = checks(libs["cuda12"], "13.0")  # vLLM 0.33.0's wheels are CUDA 13
    assert old.status == "FAIL" and "12 or older" in old.found and "CUDA 13" in old.found
    _, fine = checks(libs["cuda12"], "13.0", version="0.13.0")  # CUDA 12 engine, newer driver
    assert fine.status == "PASS"
    _, driver = checks(libs["cuda13"], "12.8", version="0.13.0")
    assert driver.status == "FAIL" and "the driver is CUDA 12.8" in driver.found
    (absent,) = checks(tmp_path / "absent.so", "13.0")
    assert (absent.check, absent.status) == ("hami.library", "FAIL")


def test_preflight_over_ssh(libs: dict[str, Path], tmp_path: Path) -> None:
    hosts = sshd_hosts()
    if "lo1" not in hosts:
        pytest.skip("needs the loopback test host lo1")
    address, port = hosts["lo1"]
    results = {}
    for name in ("cuda13", "hidden"):
        spec = tmp_path / f"{name}.yaml"
        spec.write_text(
            SPEC.format(
                version="0.33.0", host="lo1", address=address, port=port,
                key=os.environ["PDCTL_TEST_SSH_KEY"], library=libs[name],
            )
        )
        rec = tmp_path / f"rec-{name}"
        # --no-transfer: this spec's lo1 -> lo1 KV pair would run a transfer agent and make a
        # /tmp/pdctl-xfer.* folder, which the transfer modules on the other xdist worker
        # assert are absent (tests/conftest.py SHARED "xfer"); only hami.* is checked here.
        proc = pdctl(
            "preflight", str(spec), "-o", "json", "--no-transfer", "--record", str(rec),
            "--known-hosts", os.environ["PDCTL_TEST_KNOWN_HOSTS"],
        )
        results[name] = {
            f["check"]: f for f in json_findings(proc) if f["check"].startswith("hami.")
        }
        assert (rec / "lo1" / "hami-library.txt").read_text().startswith(f"path: {libs[name]}")
    assert results["cuda13"]["hami.hooks"]["status"] == "PASS"
    assert results["hidden"]["hami.hooks"]["status"] == "FAIL"


def test_h200_recording_with_the_real_hami_core() -> None:
    h200 = FIX / "hami-h200"
    proc = pdctl(
        "preflight", str(h200 / "bare-metal.yaml"), "-o", "json", "--replay",
        str(h200 / "bare-metal-record"),
    )
    found = {f["check"]: f for f in json_findings(proc)}
    assert found["hami.hooks"]["status"] == "PASS", found["hami.hooks"]
    assert found["hami.hooks"]["found"].endswith("(nm)")
    assert found["hami.cuda"]["status"] == "PASS"
    assert found["hami.cuda"]["found"] == "built against CUDA 13 or newer headers"
    assert "driver CUDA 13.0" in found["hami.cuda"]["expected"]
    # the decode engines' fit is judged in their slice, not the whole GPU
    fit = [f for f in json_findings(proc) if f["check"] == "model.fit" and "decode" in f["where"]]
    assert fit and all(
        f["found"].startswith("HAMi slice 71885 MiB of a 143771 MiB GPU x 0.95") for f in fit
    ), fit


def test_damaged_recordings_parse_without_crashing(libs: dict[str, Path]) -> None:
    """A recorded hami-library.txt is data: a damaged or hostile one never raises."""
    data = libs["cuda13"].read_bytes()

    @settings(max_examples=300, deadline=None)
    @given(
        st.lists(st.tuples(st.integers(0, len(data) - 1), st.integers(0, 255)), max_size=12),
        st.integers(0, len(data)), st.text(max_size=200),
    )
    def check(edits: list[tuple[int, int]], cut: int, text: str) -> None:
        damaged = bytearray(data[:cut])
        for i, v in edits:
            if i < len(damaged):
                damaged[i] = v
        body = base64.b64encode(bytes(damaged)).decode()
        lib = parse_hami_library(f"path: /x\nexists: yes\nreadable: yes\nbase64:\n{body}\n")
        assert lib.symbols is not None or lib.error
        parse_hami_library(text)

    check()
