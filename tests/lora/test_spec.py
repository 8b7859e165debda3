"""model.lora: located errors (file:line, field path, what, fix) for bad adapters."""

from __future__ import annotations

import pytest

from pdctl.errors import SpecError
from pdctl.plan import make_plan
from pdctl.spec import load_text
from tests.lora.specs import MODEL, load, spec_text


def error_of(text: str) -> SpecError:
    """The error as the CLI reports it: located by the spec's source (as validate/render do)."""
    with pytest.raises(SpecError) as info:
        spec, source = load_text(text, "spec.yaml")
        try:
            make_plan(spec)
        except SpecError as exc:
            raise source.locate(exc) from None
    return info.value


def test_rank_above_max_lora_rank_is_located() -> None:
    text = spec_text(
        "phase0", {"maxLoraRank": 16, "adapters": [{"name": "sql", "hf": "o/sql", "rank": 32}]}
    )
    err = error_of(text)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.strip() == "rank: 32")
    assert err.path == "model.lora.adapters[0].rank"
    assert err.line_no == line and err.file == "spec.yaml"
    assert "rank 32, above maxLoraRank 16" in err.message
    assert "maxLoraRank to at least 32" in err.fix


def test_name_of_the_served_model_is_refused() -> None:
    err = error_of(spec_text("phase0", {"adapters": [{"name": MODEL, "hf": "o/x"}]}))
    assert err.path == "model.lora.adapters[0].name"
    assert "served model's name" in err.message


def test_served_name_clash_is_refused() -> None:
    text = spec_text("phase0", {"adapters": [{"name": "chat", "hf": "o/x"}]})
    text = text.replace("  lora:", "  servedName: chat\n  lora:")
    assert error_of(text).path == "model.lora.adapters[0].name"


def test_duplicate_names_are_refused() -> None:
    adapters = [{"name": "a", "hf": "o/x"}, {"name": "a", "path": "/srv/a"}]
    err = error_of(spec_text("phase0", {"adapters": adapters}))
    assert err.path == "model.lora.adapters[1].name"
    assert "used twice" in err.message


def test_wrong_base_model_is_refused() -> None:
    adapters = [{"name": "a", "hf": "o/x", "baseModel": "Qwen/Qwen2.5-7B"}]
    err = error_of(spec_text("phase0", {"adapters": adapters}))
    assert err.path == "model.lora.adapters[0].baseModel"


@pytest.mark.parametrize(
    ("base", "source", "key"),
    [
        ("phase0", {"claim": "pvc"}, "claim"),
        ("phase0", {"image": "registry.example.com/a:v1"}, "image"),
        ("phase2-hosts", {"claim": "pvc"}, "claim"), ("phase1", {"path": "/srv/a"}, "path"),
        ("phase2-llmd", {"path": "/srv/a"}, "path"),
    ],
)
def test_a_source_the_target_cannot_mount_is_refused(base: str, source: dict, key: str) -> None:
    err = error_of(spec_text(base, {"adapters": [{"name": "a", **source}]}))
    assert err.path == f"model.lora.adapters[0].{key}"
    assert "cannot mount" in err.message or "cannot be mounted" in err.message
    assert err.line_no is not None


def test_exactly_one_source() -> None:
    err = error_of(spec_text("phase0", {"adapters": [{"name": "a", "hf": "o/x", "path": "/a"}]}))
    assert "2 sources (hf, path)" in err.message
    assert err.path.startswith("model.lora.adapters[0]")
    assert "exactly one of" in err.fix


def test_max_lora_rank_must_be_a_rank_vllm_accepts() -> None:
    err = error_of(spec_text("phase0", {"maxLoraRank": 24}))
    assert err.path == "model.lora.maxLoraRank"


def test_runtime_loading_needs_the_api_key() -> None:
    err = error_of(spec_text("phase0", {"runtimeLoading": True}))
    assert err.path == "model.lora.runtimeLoading"
    assert "secrets.apiKey" in err.fix
    ok = spec_text("phase0", {"runtimeLoading": True}, secrets={"apiKey": {"env": "KEY"}})
    make_plan(load_text(ok, "spec.yaml")[0])


def test_the_runtime_switch_is_not_settable_through_engine_env() -> None:
    text = spec_text("phase0", {}, engine={"env": {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "1"}})
    err = error_of(text)
    assert err.path == "engine.env.VLLM_ALLOW_RUNTIME_LORA_UPDATING"
    assert "runtimeLoading" in err.fix


def test_lora_flags_in_extra_args_are_refused() -> None:
    text = spec_text("phase0", {}, engine={"extraArgs": ["--max-loras", "4"]})
    err = error_of(text)
    assert err.path == "engine.extraArgs[0]" and "model.lora.maxLoras" in err.fix


def test_a_valid_spec_loads() -> None:
    spec = load("phase0", {"maxLoras": 2, "adapters": [{"name": "a", "hf": "o/x", "rank": 8}]})
    assert spec.model.lora is not None and spec.model.lora.adapters[0].rank == 8
