"""Hypothesis properties over generated specs: valid specs render (twice identical, YAML parses,
strict Kubernetes validation, scripts pass bash -n and shellcheck); broken specs raise SpecError
and nothing else."""

from __future__ import annotations

from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.render import render
from pdctl.spec import load_text
from tests.conftest import K8S_VERSION, check_scripts

dns = st.from_regex(r"[a-z][a-z0-9]{0,6}(-[a-z0-9]{1,4})?", fullmatch=True)
model_name = st.sampled_from(
    [
        "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "/models/my model",
        "o'brien/x",
    ]
)


@st.composite
def host(draw, index: int) -> dict:
    gpus = draw(st.integers(1, 8))
    h = {
        "name": f"h{index}-{draw(dns)}",
        "address": draw(st.sampled_from(["10.0.0.1", "gpu.example.com", "127.0.0.1"])),
        "gpus": list(range(gpus)), "runtime": draw(st.sampled_from(["conda", "docker", "venv"])),
    }
    if draw(st.booleans()):
        h["dataDir"] = draw(st.sampled_from(["/srv/pdctl", "~/deploy dir", "/tmp/$x"]))
    if h["runtime"] == "venv":
        h["venv"] = "/opt/vllm env"
    return h


@st.composite
def spec_dict(draw) -> dict:
    phase = draw(st.sampled_from([0, 1]))
    tp = draw(st.sampled_from([1, 1, 2, 4]))
    d: dict = {
        "name": draw(dns), "phase": phase, "model": {"name": draw(model_name)},
        "engine": {"version": draw(st.sampled_from(["0.23.0", "0.33.0", "0.28.1"]))},
        "serve": {"replicas": draw(st.integers(1, 4)), "tensorParallel": tp},
    }
    if draw(st.booleans()):
        d["model"]["maxModelLen"] = draw(st.integers(256, 131072))
    if draw(st.booleans()):
        d["serve"]["gpuMemoryUtilization"] = draw(st.floats(0.1, 1.0))
    if draw(st.booleans()):
        d["serve"]["maxNumSeqs"] = draw(st.integers(1, 1024))
    if draw(st.booleans()):
        d["secrets"] = {"hfToken": {"env": "HF_TOKEN"}}
    if draw(st.booleans()):
        d["engine"]["env"] = {"VLLM_LOGGING_LEVEL": draw(st.sampled_from(["INFO", "a b", "$(x)"]))}
    n = draw(st.integers(1, 3))
    d["hosts"] = [draw(host(i)) for i in range(n)]
    if phase == 1:
        d["kubernetes"] = {
            "namespace": draw(dns), "createNamespace": draw(st.booleans()),
            "storage": {"type": draw(st.sampled_from(["pvc", "emptyDir"]))},
        }
        if draw(st.booleans()):
            d["kubernetes"]["nodeSelector"] = {"nvidia.com/gpu.product": "NVIDIA-H100"}
            d["kubernetes"]["tolerations"] = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}]
    return d


def render_text(text: str):
    spec, _ = load_text(text, "gen.yaml")
    return render(make_plan(spec))


SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@SETTINGS
@given(d=spec_dict())
def test_valid_specs_render_or_refuse_cleanly(d: dict, tmp_path_factory) -> None:
    text = yaml.safe_dump(d, sort_keys=False)
    try:
        bundle = render_text(text)
    except SpecError as exc:
        # Only placement (too few GPUs, TP not dividing) and the shared-claim rule (2+ pods on a
        # ReadWriteOnce claim) can refuse a well-typed spec.
        assert exc.path.startswith(("hosts", "serve", "kubernetes.storage")), exc
        return
    again = render_text(text)
    assert bundle.stream() == again.stream()
    if bundle.kind == "kubernetes":
        for doc in yaml.safe_load_all(bundle.stream()):
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    else:
        tmp: Path = tmp_path_factory.mktemp("scripts")
        check_scripts({a.path: a.text for a in bundle}, tmp)


def _mutations():
    bad_values = st.sampled_from([None, "x", -1, 0, 1.5, [], {}, [1, "a"], {"k": 1}, True, "0"])
    return st.tuples(st.integers(0, 10_000), bad_values, st.booleans())


def _paths(obj, prefix=()):
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


@SETTINGS
@given(d=spec_dict(), mutation=_mutations())
def test_broken_specs_raise_spec_error_only(d: dict, mutation) -> None:
    pick, value, rename = mutation
    paths = list(_paths(d))
    path = paths[pick % len(paths)]
    parent = d
    for part in path[:-1]:
        parent = parent[part]
    if rename and isinstance(parent, dict):
        parent[str(path[-1]) + "Typo"] = parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    try:
        render_text(yaml.safe_dump(d, sort_keys=False))
    except SpecError as exc:
        assert exc.line() and "\n" not in exc.line()
    # A mutation may still be valid (e.g. a string where any string is fine): then it renders.


@pytest.mark.parametrize("junk", ["[", "{a: [}", "a: b: c", "\t- x", "key: 'unterminated", "@"])
def test_yaml_junk_is_a_spec_error(junk: str) -> None:
    with pytest.raises(SpecError):
        load_text(junk, "junk.yaml")
