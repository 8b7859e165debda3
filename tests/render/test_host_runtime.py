"""A host's runtime follows what it names: only `venv` runs that environment (not conda), a
runtime that would ignore `venv` or `condaEnv` is refused in one located line; and `validate`
lists every unit it counts (the router and a Mooncake master too)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from tests.helpers import at, cli


def spec(host: str) -> str:
    return (
        "name: demo\nmodel: {name: org/model}\nhosts:\n"
        f"  - {{name: gpu-a, address: 192.0.2.10, gpus: [0], {host}}}\n"
        "serve: {replicas: 1}\n"
    )


@pytest.mark.parametrize(
    ("host", "runtime"),
    [
        ("venv: /opt/vllm", "venv"), ("condaEnv: my-env", "conda"), ("user: ubuntu", "conda"),
        ("runtime: venv, venv: /opt/vllm", "venv"), ("runtime: docker", "docker"),
    ],
)
def test_the_runtime_follows_the_environment_named(host: str, runtime: str) -> None:
    loaded, _ = load_text(spec(host), "spec.yaml")
    assert loaded.hosts[0].runtime == runtime


def test_only_venv_runs_the_venv_not_conda() -> None:
    loaded, _ = load_text(spec("venv: /opt/vllm"), "spec.yaml")
    script = render(make_plan(loaded))["hosts/gpu-a/demo-serve-0/start.sh"]
    assert "# Runtime venv: the Python environment /opt/vllm." in script
    assert "conda" not in script


@pytest.mark.parametrize(
    ("host", "path", "phrase"),
    [
        ("runtime: conda, venv: /opt/vllm", "hosts[0].venv", "runtime conda"),
        ("condaEnv: e, venv: /opt/vllm", "hosts[0].venv", "condaEnv is given too"),
        ("runtime: docker, venv: /opt/vllm", "hosts[0].venv", "runtime docker"),
        ("runtime: docker, condaEnv: e", "hosts[0].condaEnv", "runtime docker"),
        ("runtime: venv, venv: /v, condaEnv: e", "hosts[0].condaEnv", "runtime venv"),
    ],
)
def test_a_runtime_that_ignores_an_environment_is_refused(host: str, path: str, phrase: str):
    with pytest.raises(SpecError) as err:
        load_text(spec(host), "spec.yaml")
    assert at(err.value) == ("spec.yaml", 4, path) and phrase in err.value.message, err.value
    assert "\n" not in err.value.line()


STORE = Path(__file__).resolve().parents[2] / "examples" / "phase2-mooncake-store.yaml"


def test_validate_lists_every_unit_it_counts(capsys: pytest.CaptureFixture[str]) -> None:
    out, _err = cli(["validate", str(STORE)])
    assert "6 units planned" in out
    listed = [line.split()[0] for line in out.splitlines()[1:]]
    assert listed == [
        "qwen-store-mooncake-master", "qwen-store-prefill-0", "qwen-store-prefill-1",
        "qwen-store-decode-0", "qwen-store-decode-1", "qwen-store-router",
    ]
