"""LoRA specs for the tests: one base per phase/target, adapters added by the caller."""

from __future__ import annotations

import yaml

from pdctl.spec import load_text
from tests.helpers import bundle_of

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
HOSTS = [{"name": "a", "address": "192.0.2.1", "gpus": [0, 1]}]
BASES = {
    "phase0": {"phase": 0, "hosts": HOSTS, "serve": {"replicas": 1}},
    "phase0-docker": {
        "phase": 0, "hosts": [{**HOSTS[0], "runtime": "docker"}], "serve": {"replicas": 1},
    },
    "phase1": {"phase": 1, "serve": {"replicas": 1}},
    "phase2-hosts": {
        "phase": 2, "hosts": HOSTS, "prefill": {"replicas": 1}, "decode": {"replicas": 1},
        "disaggregation": {"connector": "nixl"},
    },
    "phase2-llmd": {
        "phase": 2, "prefill": {"replicas": 1}, "decode": {"replicas": 1},
        "disaggregation": {"connector": "nixl"}, "kubernetes": {"storage": {"type": "emptyDir"}},
    },
}


def spec_text(base: str, lora: dict, **top: object) -> str:
    data = {"name": "demo", "model": {"name": MODEL, "lora": lora}, **BASES[base], **top}
    return yaml.safe_dump(data, sort_keys=False)


def load(base: str, lora: dict, **top: object):
    return load_text(spec_text(base, lora, **top), "spec.yaml")[0]


def bundle(base: str, lora: dict, **top: object):
    return bundle_of(spec_text(base, lora, **top))
