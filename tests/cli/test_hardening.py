"""Review fixes: no injection through spec values, flags pdctl owns, clean usage errors,
render --output-dir / init -o that never clobber or trace back."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from tests.helpers import cli, data, plan_of, run_cli, written

BASE = """\
name: demo
model:
  name: {model}
engine:
  version: {version}
  extraArgs: {extra}
  env: {env}
hosts:
  - name: {host}
    address: {address}
    user: {user}
    gpus: [0, 1]
    runtime: {runtime}
    condaEnv: {conda}
    hfCache: {cache}
serve:
  replicas: 1
"""

GOOD = dict(
    model="Qwen/Qwen2.5-7B-Instruct", version='"0.33.0"', extra="[]", env="{}", host="gpu-a",
    address="192.0.2.10", user="ubuntu", runtime="conda", conda="vllm-env", cache="/data/hf",
)


def spec_text(**over: str) -> str:
    text = BASE.format(**{**GOOD, **over})
    if over.get("runtime", "conda") != "conda":  # condaEnv is for runtime conda only
        text = text.replace(f"    condaEnv: {over.get('conda', GOOD['conda'])}\n", "")
    return text


def plan_error(text: str) -> SpecError:
    with pytest.raises(SpecError) as info:
        spec, source = load_text(text, "spec.yaml")
        try:
            make_plan(spec)
        except SpecError as exc:
            raise source.locate(exc) from None
    return info.value


def start_sh(text: str) -> str:
    return render(plan_of(text))["hosts/gpu-a/demo-serve-0/start.sh"]


def test_the_base_spec_is_good() -> None:
    assert render(plan_of(spec_text())).paths()


REFUSALS = data("refusals.yaml")
BAD = [(c["id"], c["over"], c["path"], c["phrase"]) for c in REFUSALS["hardening"]]


@pytest.mark.parametrize(("case", "over", "path", "phrase"), BAD, ids=[b[0] for b in BAD])
def test_bad_value_is_a_spec_error(case: str, over: dict, path: str, phrase: str) -> None:
    err = plan_error(spec_text(**over))
    assert err.path.startswith(path), err.line()
    assert phrase in err.line()
    assert len(err.line().splitlines()) == 1
    assert err.file == "spec.yaml" and err.line_no is not None


def test_image_that_reads_as_a_docker_option_is_refused() -> None:
    text = spec_text(runtime="docker").replace('  version: "0.33.0"', "  image: --privileged")
    err = plan_error(text)
    assert err.path == "engine.image" and "image reference" in err.message


def test_secret_key_must_be_a_secret_key() -> None:
    text = "name: d\nphase: 1\nmodel: {name: x}\nserve: {}\n"
    text += "secrets: {hfToken: {env: HF_TOKEN, secretKey: 'a b'}}\n"
    assert plan_error(text).path == "secrets.hfToken.secretKey"


def test_comment_lines_quote_spec_values(tmp_path: Path) -> None:
    """Values in rendered comments are shell-quoted like everywhere else."""
    assert "# Runtime conda: the env my.env-1 with vllm==0.33.0" in start_sh(
        spec_text(conda="my.env-1"))
    venv = (
        spec_text()
        .replace("runtime: conda", "runtime: venv")
        .replace("condaEnv: vllm-env", "venv: /opt/my venv")
    )
    assert "# Runtime venv: the Python environment '/opt/my venv'." in start_sh(venv)


def test_docker_mounts_a_model_folder_given_as_a_path() -> None:
    script = start_sh(spec_text(runtime="docker", model="/models/qwen"))
    assert "  -v /models/qwen:/models/qwen:ro \\\n" in script
    assert "\n  /models/qwen --host 0.0.0.0 --port 8000" in script
    assert ":ro" not in start_sh(spec_text(runtime="docker"))


# ---- the CLI ---------------------------------------------------------------------------


run = run_cli


@pytest.mark.parametrize(
    ("argv", "phrase"),
    [
        (["render", "SPEC", "--bogus"], "No such option: --bogus; see `pdctl render --help`"),
        (["render"], "Missing argument"),
        (["validate", "SPEC", "extra"], "unexpected extra argument"),
        (["init", "-p", "x"], "Invalid value for '--phase'"),
        (["schema", "x"], "unexpected extra argument"), (["nosuch"], "No such command 'nosuch'"),
        (["render", "SPEC", "--phase"], "requires an argument"),
    ],
)
def test_usage_errors_are_one_line_exit_2(argv: list[str], phrase: str, tmp_path, capsys) -> None:
    spec = written(tmp_path / "spec.yaml", spec_text())
    out, err = cli([str(spec) if a == "SPEC" else a for a in argv], 2)
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith("error: ") and phrase in err


def test_render_output_refuses_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec = written(tmp_path / "spec.yaml", spec_text())
    code, _, err = run(["render", str(spec), "--output-dir", str(spec)], capsys)
    assert code == 2 and "is a file, not a folder" in err and len(err.splitlines()) == 1
    assert spec.read_text() == spec_text()


def test_render_output_refuses_another_deployments_bundle(tmp_path, capsys) -> None:
    spec = written(tmp_path / "spec.yaml", spec_text())
    out = tmp_path / "out"
    assert run(["render", str(spec), "--output-dir", str(out)], capsys)[0] == 0
    again = run(["render", str(spec), "--output-dir", str(out)], capsys)
    assert again[0] == 0  # its own: rewritten
    assert json.loads((out / ".pdctl-manifest").read_text())["deployment"] == "demo"
    other = written(tmp_path / "other.yaml", spec_text().replace("name: demo", "name: other"))
    code, _, err = run(["render", str(other), "--output-dir", str(out)], capsys)
    assert code == 2 and "holds the bundle of deployment 'demo'" in err
    assert json.loads((out / ".pdctl-manifest").read_text())["deployment"] == "demo"


def test_render_output_unwritable_is_one_line(tmp_path, capsys) -> None:
    spec = written(tmp_path / "spec.yaml", spec_text())
    blocker = written(tmp_path / "file", "x")
    code, out, err = run(["render", str(spec), "--output-dir", str(blocker / "out")], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: --output-dir {blocker / 'out'}: cannot write it ("), err
    assert "; give a path in a folder you can write to" in err, err
    assert out == "" and blocker.read_text() == "x"
    code, out, err = run(["render", str(spec), "--output-dir", "/proc/pdctl-x"], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: --output-dir /proc/pdctl-x: cannot write it ("), err


def test_init_output_errors_are_one_line(tmp_path, capsys) -> None:
    missing = tmp_path / "missing" / "spec.yaml"
    code, _, err = run(["init", "-o", str(missing)], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: --output {missing}: no directory {missing.parent}; "), err
    assert "create the directory first" in err, err
    code, _, err = run(["init", "-o", "/proc/pdctl-x.yaml"], capsys)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("error: --output /proc/pdctl-x.yaml: cannot write it ("), err
    assert "; give a path" in err, err
    code, _, err = run(["init", "-o", str(tmp_path), "--force"], capsys)
    assert code == 2 and "is a directory; give a file name" in err
    target = written(tmp_path / "spec.yaml", "mine\n")
    code, _, err = run(["init", "-o", str(target)], capsys)
    assert code == 2 and "--force" in err and target.read_text() == "mine\n"


K8S = "name: d\nphase: 1\nmodel: {name: x}\nserve: {}\nkubernetes: %s\n"


@pytest.mark.parametrize(
    ("kube", "path", "phrase"), [tuple(c.values()) for c in REFUSALS["kubernetes"]]
)
def test_kubernetes_values_the_api_server_would_refuse(kube: str, path: str, phrase: str) -> None:
    err = plan_error(K8S % kube)
    assert err.path.startswith(path), err.line()
    assert phrase in err.message


def test_cpu_may_be_a_plain_number() -> None:
    text = render(plan_of(K8S % "{resources: {cpu: 0.5, memory: 2Gi}, shmSize: 8Gi}")).stream()
    assert "cpu: '0.5'" in text and "memory: 2Gi" in text and "sizeLimit: 8Gi" in text


def test_one_machine_listed_twice_is_refused() -> None:
    text = spec_text().replace(
        "serve:", "  - {name: gpu-b, address: 192.0.2.10, gpus: [2, 3]}\nserve:"
    )
    err = plan_error(text)
    assert err.path == "hosts" and "same machine" in err.message
    # Same address, another SSH port: another machine (e.g. a forwarded port).
    load_text(
        text.replace("address: 192.0.2.10, gpus", "address: 192.0.2.10, port: 2222, gpus"), "s.yaml"
    )


def test_stdin_that_is_not_utf8_is_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"\xff\xfename: d\n")))
    code, out, err = run(["validate", "-"], capsys)
    assert code == 2 and err == "error: <stdin>: is not UTF-8 text\n" and out == ""


def test_gpu_counts_read_as_english(tmp_path: Path) -> None:
    err = plan_error(
        spec_text().replace("gpus: [0, 1]", "gpus: [0]").replace("replicas: 1", "replicas: 2")
    )
    assert "needs 1 free GPU on one host" in err.message and "1 GPUs" not in err.message


def test_a_target_from_the_command_line_is_named_as_such(tmp_path, capsys) -> None:
    spec = written(tmp_path / "spec.yaml", spec_text())
    _, err = cli(["render", str(spec), "--target", "kubernetes"], 2)
    assert err == (
        f"error: {spec}: --target kubernetes: phase 0 runs on hosts only; "
        "use phase 1 for Kubernetes\n"
    )


@pytest.mark.parametrize(
    ("change", "path", "phrase"),
    [
        ({"runtime": "conda"}, "hosts[0].runtime", "CUDA build of vLLM"),
        ({"runtime": "docker"}, "engine.image", "CPU image"),
        ({"phase": 1}, "engine.image", "CPU image"),
    ],
)
def test_cpu_engines_are_not_given_cuda_builds(change: dict, path: str, phrase: str) -> None:
    text = spec_text().replace('  version: "0.33.0"', "  device: cpu")
    if "runtime" in change:
        text = text.replace("runtime: conda", f"runtime: {change['runtime']}")
        if change["runtime"] != "conda":  # condaEnv is for runtime conda only
            text = text.replace("    condaEnv: vllm-env\n", "")
    else:
        text = "phase: 1\n" + text
    err = plan_error(text)
    assert err.path == path and phrase in err.message, err.line()
    # With a CPU image the container runtimes are fine.
    if path == "engine.image":
        spec, _ = load_text(
            text.replace("  device: cpu", "  device: cpu\n  image: my/vllm-cpu:1"), "s.yaml"
        )
        make_plan(spec)


@pytest.mark.parametrize("name", ["7b", "a" * 51])
def test_deployment_name_fits_service_names(name: str) -> None:
    err = plan_error(spec_text().replace("name: demo", f"name: {name}"))
    assert err.path == "name" and "starts with a letter" in err.message


@pytest.mark.parametrize(
    ("version", "flag"),
    [("0.23.0", "--no-enable-prefix-caching"), ("0.33.0", "--disable-prefix-caching")],
)
def test_prefix_caching_off_uses_a_flag_the_version_has(version: str, flag: str) -> None:
    """vLLM 0.33.0's parser has no --no-enable-prefix-caching (pdctl/data flag dump)."""
    text = spec_text(version=f'"{version}"').replace(
        "replicas: 1", "replicas: 1\n  enablePrefixCaching: false"
    )
    plan = plan_of(text)
    assert flag in plan.instances[0].args
    assert plan.release.has_flag(flag)


def test_render_stdin_with_facts_reads_the_spec_once(tmp_path, monkeypatch, capsys) -> None:
    facts = tmp_path / "facts"
    facts.mkdir()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(spec_text().encode())))
    out, err = cli(["render", "-", "--facts", str(facts)])
    assert out.startswith("#### hosts/gpu-a/demo-serve-0/start.sh\n")


def test_ports_past_65535_are_a_spec_error() -> None:
    text = spec_text().replace("replicas: 1", "replicas: 2\n  port: 65535")
    err = plan_error(text)
    assert err.path == "serve.port" and "65536" in err.message and "65534" in err.fix
