"""`pdctl bundle --facts DIR --skip-installed`: preflight's bundle.txt lists the distributions of
each host's engines' environment (real sshd hosts lo1 and lo2 of tests/services.sh, real venvs);
a wheel every host that installs it has (in a version that meets what the closure asks of it)
is left out of the bundle and named in the manifest, one a host lacks stays; pip installs from
the bundle with no index where the left-out one is installed, and names it where it is not; a
recording without the list is refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from pdctl.cli.bundle_cmd import installed
from pdctl.offline import manifest as mf
from pdctl.offline.download import bundle
from pdctl.offline.need import Need
from pdctl.offline.ship import ship
from pdctl.plan import make_plan
from pdctl.preflight.bundle import parse
from pdctl.render.host import wheels_dir
from pdctl.spec import load_text
from pdctl.targets.ssh import Connection, SshOptions
from tests.helpers import known, pdctl
from tests.offline.test_bundle import recording
from tests.targets.testbed import host_entry, stand_in_spec

SIX = "six-1.17.0-py2.py3-none-any.whl"
SIX_OLD = "six-1.16.0-py2.py3-none-any.whl"
DATEUTIL = "python_dateutil-2.9.0.post0-py2.py3-none-any.whl"
WANT = ("python-dateutil==2.9.0.post0",)  # depends on six (>=1.5)
TAG = "manylinux_2_28_x86_64"


def venv(path: Path, pip: bool) -> Path:
    subprocess.run([sys.executable, "-m", "venv", *([] if pip else ["--without-pip"]), str(path)],
                   check=True)
    return path


def test_what_every_host_has_is_left_out_and_pip_finds_it_installed(ssh_env, tmp_path):
    # lo1's venv has six 1.16.0 (from a wheel pip downloads here), lo2's has nothing; the
    # bundle's closure takes six 1.17.0, and python-dateutil asks six>=1.5: 1.16.0 meets it
    for six in ("six==1.16.0", "six==1.17.0"):
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d",
                        str(tmp_path / "w"), six], check=True)
    with_six = venv(tmp_path / "venv-a", pip=True)
    subprocess.run([with_six / "bin/python", "-m", "pip", "install", "-q", "--no-index",
                    str(tmp_path / "w" / SIX_OLD)], check=True)
    hosts = [host_entry(ssh_env, ssh_env.host("lo1"), tmp_path, venv=str(with_six), gpus=[0]),
             host_entry(ssh_env, ssh_env.host("lo2"), tmp_path,
                        venv=str(venv(tmp_path / "venv-b", pip=False)), gpus=[0])]
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(stand_in_spec("skip", hosts, {"replicas": 2, "port": 18998},
                                                 engine={"device": "cuda"}), sort_keys=False))
    rec = tmp_path / "rec"
    got = pdctl("preflight", str(spec), "--record", str(rec), "--no-transfer", *known(ssh_env))
    assert got.returncode in (0, 1), got.stderr
    lo1, lo2 = (parse((rec / h / "bundle.txt").read_text()) for h in ("lo1", "lo2"))
    assert lo1.env == str(with_six) and ("six", "1.16.0") in (lo1.dists or ()), lo1
    assert lo2.env == str(tmp_path / "venv-b") and lo2.dists == (), lo2

    plan = make_plan(load_text(spec.read_text(), "spec.yaml")[0])
    said: list[str] = []
    one = (Need("engines (venv)", WANT, hosts=("lo1",)),)
    made = bundle(plan, one, "3.11", TAG, tmp_path / "b", said.append,
                  have=installed(rec, plan, one), facts=str(rec))
    assert [e.path for e in made.files] == [f"wheels/{DATEUTIL}"]
    assert any(line.endswith(": six==1.17.0 (hosts have 1.16.0)") for line in said), said
    assert made.skipped == (mf.Skipped(SIX, "six==1.17.0", (tmp_path / "w" / SIX).stat().st_size,
                                       (("lo1", str(with_six)),)),)
    assert mf.verify(tmp_path / "b") == made and not (tmp_path / "b/wheels" / SIX).exists()
    data = json_of(tmp_path / "b")
    assert data["facts"] == str(rec) and data["skipped"][0]["installed"] == {"lo1": str(with_six)}

    # pip installs from the bundle alone: six 1.16.0 is found installed in lo1's venv
    ship(plan, tmp_path / "b", made, SshOptions(known_hosts=ssh_env.known_hosts))
    there = wheels_dir(plan, plan.spec.hosts[0])
    assert sorted(p.name for p in Path(there).iterdir()) == [DATEUTIL]
    install = (f"{with_six}/bin/python -m pip install --no-index --find-links {there} "
               f"{WANT[0]}")
    conn = Connection(plan.spec.hosts[0], SshOptions(known_hosts=ssh_env.known_hosts)).connect()
    try:
        done = conn.run(install)
        assert done.rc == 0, done.out + done.err
        # the host changed after the recording: pip names what the bundle left out
        conn.run(f"{with_six}/bin/python -m pip uninstall -y -q six python-dateutil")
        again = conn.run(install)
        assert again.rc == 1 and "No matching distribution found for six" in again.err, again.err
    finally:
        conn.close()

    # lo2 installs it too and lacks six; a service's venv (not recorded) wants six: both keep it
    for found in ((Need("engines (venv)", WANT, hosts=("lo1", "lo2")),),
                  (*one, Need("router", ("six==1.17.0",)))):
        kept = bundle(plan, found, "3.11", TAG, tmp_path / "b", said.append,
                      have=installed(rec, plan, found[:1]), facts=str(rec))
        assert [e.path for e in kept.files] == [f"wheels/{DATEUTIL}", f"wheels/{SIX}"]
        assert kept.skipped == () and "1 files already present" in " ".join(said[-6:]), said


def json_of(folder: Path) -> dict:
    return json.loads((folder / mf.MANIFEST).read_text())


def test_skip_installed_needs_a_recording_with_the_package_lists(tmp_path: Path):
    rec = recording(tmp_path / "rec", {"gpu-a": ("3.12", "2.35")})  # no package list
    args = ("bundle", "examples/phase2-nixl-hosts.yaml", "-o", str(tmp_path / "b"),
            "--skip-installed")
    for extra, says in (((), "error: --skip-installed: what the hosts have comes from a "
                             "recording; add --facts DIR (made by `pdctl preflight SPEC "
                             "--record DIR`)"),
                        (("--facts", str(rec)), f"error: --skip-installed: the recording {rec} "
                         "lists no packages of host gpu-a (no gpu-a/bundle.txt, or one an older "
                         f"pdctl wrote); record the hosts again with `pdctl preflight SPEC "
                         f"--record {rec}`")):
        got = pdctl(*args, *extra)
        assert got.returncode == 2 and got.stderr.strip().splitlines() == [says], got.stderr
    assert not (tmp_path / "b").exists()


def test_an_installed_local_label_stands_for_the_wheel_without_one(tmp_path: Path):
    # the GPU image's torch is 2.11.0+cu130 (PyTorch's index); vLLM 0.23.0's closure has PyPI's
    # torch-2.11.0 wheel: pip takes the installed one for torch==2.11.0 and installs nothing
    from pdctl.offline.download import satisfies, skip_installed

    assert satisfies("2.11.0+cu130", "2.11.0") and satisfies("2.11.0", "2.11.0")
    assert not satisfies("2.11.0", "2.11.0+cu130")  # a wheel's own label is wanted
    assert not satisfies("2.11.0+cu130", "2.11.0+cu128") and not satisfies(None, "2.11.0")
    assert not satisfies("2.11.1+cu130", "2.11.0") and not satisfies("2.11.0.post1", "2.11.0")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    names = ("torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl",
             "torchvision-0.26.0+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
             "triton-3.6.0-cp312-cp312-manylinux_2_28_x86_64.whl")
    for name in names:
        (wheels / name).write_bytes(b"w")
    env = Need("engines (venv)", ("vllm==0.23.0",), hosts=("gpu-a", "gpu-b"))
    have = {"gpu-a": ("/opt/torch/.venv", {"torch": "2.11.0+cu130", "torchvision": "0.26.0",
                                           "triton": "3.6.0"}),
            "gpu-b": ("/opt/torch/.venv", {"torch": "2.11.0", "torchvision": "0.26.0+cu130",
                                           "triton": "3.5.1"})}
    got = skip_installed(wheels, {env: {"torch", "torchvision", "triton"}}, have, "3.12",
                         "manylinux_2_28_x86_64")
    assert [s.dist for s in got] == ["torch==2.11.0"]  # triton: gpu-b has another version
    assert sorted(p.name for p in wheels.iterdir()) == sorted(names[1:])


def wheel(folder: Path, name: str, version: str, *requires: str) -> Path:
    """A wheel file with only its METADATA (what `requires.requirements` reads)."""
    import zipfile

    path = folder / f"{name}-{version}-py3-none-any.whl"
    meta = "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr(f"{name}-{version}.dist-info/METADATA",
                     f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{meta}\ndescr")
    return path


def test_another_installed_version_stands_for_the_wheel_where_it_meets_every_requirement(
    tmp_path: Path,
):
    from pdctl.offline.download import skip_installed

    def left_out(host_numpy: str, *also: str, damaged: bool = False) -> list[str]:
        wheels = tmp_path / f"w{len(list(tmp_path.iterdir()))}"
        wheels.mkdir()
        wheel(wheels, "numpy", "2.3.5")
        wheel(wheels, "opencv_python_headless", "5.1.0.95", "numpy>=2; python_version>='3.9'",
              "numpy<1.20; python_version<'3.8'")  # the second one is not for Python 3.12
        wheel(wheels, "vllm", "0.23.0", "numpy<2.5", "opencv-python-headless>=4.13", *also)
        if damaged:
            (wheels / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip")
        env = Need("engines (venv)", ("vllm==0.23.0",), hosts=("gpu-a",))
        have = {"gpu-a": ("/opt/venv", {"numpy": host_numpy, "opencv-python-headless": "4.12.0"})}
        closure = {"numpy", "opencv-python-headless", "vllm"}
        return [s.dist for s in skip_installed(wheels, {env: closure}, have, "3.12",
                                               "manylinux_2_39_x86_64")]

    assert left_out("2.2.6") == ["numpy==2.3.5"]  # >=2 and <2.5: pip keeps 2.2.6
    assert left_out("1.26.4") == []  # opencv asks numpy>=2
    assert left_out("2.5.0") == []  # vllm asks numpy<2.5
    assert left_out("2.2.6", "numpy!=2.2.6") == []
    # a requirement under an extra counts (which extras the closure took is not known here)
    assert left_out("2.2.6", "numpy<2.1; extra == 'old'") == []
    assert left_out("not-a-version") == []
    # opencv 4.12.0 on the host is below vllm's >=4.13: its 5.1.0.95 wheel stays, every time
    # a wheel that cannot be read: only the wheel's own version stands for it
    assert left_out("2.2.6", damaged=True) == [] and left_out("2.3.5", damaged=True) == [
        "numpy==2.3.5"]
