"""Preflight on Mooncake hosts (pdctl issue 10, item 4): the probe asks the linker cache for the
libraries the mooncake-transfer-engine wheels load, and host.libs FAILs naming the missing ones
and the apt/dnf command. The probe command runs for real under sh."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from pdctl.preflight.host import LIBS, libraries_command
from pdctl.preflight.registry import commands, facts_from, host_facts, run_checks
from tests.conftest import ROOT
from tests.helpers import plan_of
from tests.preflight.conftest import FIX, by_check, raw_of

ALL = ("libibverbs.so.1", "libnuma.so.1", "libcurl.so.4", "libmlx5.so.1")


def libs_text(found: tuple[str, ...]) -> str:
    return "".join(f"{lib} {'yes' if lib in found else 'no'}\n" for lib in ALL)


def example(name: str):
    return plan_of(ROOT / "examples" / f"{name}.yaml")


def test_parse_the_probe_output() -> None:
    hf = host_facts("a", {LIBS: libs_text(("libnuma.so.1", "libcurl.so.4"))})
    assert hf.libraries == (
        ("libibverbs.so.1", False), ("libnuma.so.1", True), ("libcurl.so.4", True),
        ("libmlx5.so.1", False),
    )
    none = host_facts("a", {LIBS: "ldconfig: not found\n"})
    assert none.libraries is None and none.why_missing(LIBS) == "no ldconfig on the host"


def test_missing_libraries_fail_with_the_install_command() -> None:
    plan = example("phase2-mooncake-tcp")
    raw = {
        "gpu-a": {**raw_of(FIX / "h200x2"), LIBS: libs_text(ALL)},
        "gpu-b": {**raw_of(FIX / "h200x2"), LIBS: libs_text(("libnuma.so.1", "libcurl.so.4"))},
    }
    libs = {f.where: f for f in by_check(run_checks(plan, facts_from(raw)), "host.libs")}
    assert libs["gpu-a"].status == "PASS"
    bad = libs["gpu-b"]
    assert bad.status == "FAIL"
    assert bad.found == "missing: libibverbs.so.1, libmlx5.so.1"
    assert bad.fix == (
        "sudo apt-get install -y libibverbs1 ibverbs-providers (Debian/Ubuntu) or "
        "sudo dnf install -y libibverbs (RHEL/Fedora)"
    )
    assert "even for protocol tcp" in bad.expected


def test_unrecorded_libraries_warn() -> None:
    plan = example("phase2-mooncake-tcp")
    raw = {h: raw_of(FIX / "h200x2") for h in ("gpu-a", "gpu-b")}
    libs = by_check(run_checks(plan, facts_from(raw)), "host.libs")
    assert [f.status for f in libs] == ["WARN", "WARN"]
    assert all("not gathered" in f.found for f in libs)


def test_a_master_only_host_needs_no_libmlx5() -> None:
    doc = yaml.safe_load((ROOT / "examples" / "phase2-mooncake-store.yaml").read_text())
    # A third host after the two that hold all four engines: only mooncake_master runs there.
    doc["hosts"].append({"name": "kv", "address": "192.0.2.12", "gpus": [0]})
    doc["disaggregation"]["store"]["host"] = "kv"
    plan = plan_of(doc)
    raw = {h: {**raw_of(FIX / "h200x2"), LIBS: libs_text(ALL)} for h in ("gpu-a", "gpu-b")}
    raw["kv"] = {LIBS: libs_text(("libibverbs.so.1", "libnuma.so.1", "libcurl.so.4"))}
    libs = {f.where: f for f in by_check(run_checks(plan, facts_from(raw)), "host.libs")}
    assert {i.host.name for i in plan.instances} == {"gpu-a", "gpu-b"}
    assert libs["kv"].status == "PASS" and "libmlx5" not in libs["kv"].expected
    raw["kv"] = {LIBS: libs_text(())}
    kv = [f for f in by_check(run_checks(plan, facts_from(raw)), "host.libs") if f.where == "kv"]
    assert kv[0].status == "FAIL" and kv[0].fix.startswith(
        "sudo apt-get install -y libibverbs1 libnuma1 curl (Debian/Ubuntu)"
    )


def test_only_mooncake_specs_probe_and_check_libraries() -> None:
    mooncake = example("phase2-mooncake-tcp")
    assert LIBS in commands(mooncake.spec, mooncake.spec.hosts[0])
    nixl = example("phase2-nixl-hosts")
    assert LIBS not in commands(nixl.spec, nixl.spec.hosts[0])
    raw = {"gpu-a": {**raw_of(FIX / "h200x2"), LIBS: libs_text(())}}
    assert not by_check(run_checks(nixl, facts_from(raw)), "host.libs")


def test_probe_command_runs_under_sh(tmp_path: Path) -> None:
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "ldconfig").write_text(
        "#!/bin/sh\necho '3 libs found in cache'\n"
        "printf '\\tlibnuma.so.1 (libc6,x86-64) => /usr/lib/libnuma.so.1\\n'\n"
        "printf '\\tlibcurl.so.4 (libc6,x86-64) => /usr/lib/libcurl.so.4\\n'\n"
    )
    (fake / "ldconfig").chmod(0o755)
    extra = tmp_path / "ofed"
    extra.mkdir()
    (extra / "libmlx5.so.1").write_text("")
    res = subprocess.run(
        ["/bin/sh", "-c", libraries_command(ALL)], capture_output=True, text=True, timeout=60,
        env={"PATH": f"{fake}:/usr/bin:/bin", "LD_LIBRARY_PATH": f"{extra}:/nowhere"},
    )
    assert res.returncode == 0, res.stderr
    hf = host_facts("a", {LIBS: res.stdout})
    assert dict(hf.libraries or ()) == {
        "libibverbs.so.1": False, "libnuma.so.1": True, "libcurl.so.4": True, "libmlx5.so.1": True,
    }
    # No ldconfig on PATH: the probe also looks in /sbin and /usr/sbin (a user's PATH on
    # Debian lacks them), and says so when there is none at all.
    res = subprocess.run(
        ["/bin/sh", "-c", libraries_command(ALL)], capture_output=True, text=True, timeout=60,
        env={"PATH": str(tmp_path / "nothing")},
    )
    if any(Path(d, "ldconfig").exists() for d in ("/sbin", "/usr/sbin")):
        assert [line.split()[0] for line in res.stdout.splitlines()] == list(ALL), res.stdout
    else:
        assert res.stdout == "ldconfig: not found\n"
