"""LoRA adapters in `pdctl top`: which adapters each engine has requests for.

vLLM exposes them in one gauge, `vllm:lora_requests_info{max_lora, running_lora_adapters,
waiting_lora_adapters}` (vllm/v1/metrics/loggers.py), set to the current time at each stats
update: the labels name the adapters with running and with waiting requests (comma-separated),
not how many requests each has. The prometheus client keeps every label set it was given, so
the newest sample (the largest value) is the current one."""

from __future__ import annotations

from pdctl.top.metrics import Snapshot

LORA_INFO = "vllm:lora_requests_info"


def lora_adapters(snap: Snapshot) -> tuple[tuple[str, ...], tuple[str, ...]] | None:
    """(adapters with running requests, with waiting requests); None when vLLM runs no LoRA."""
    found = [(v, dict(labels)) for n, labels, v in snap.samples if n == LORA_INFO]
    if not found:
        return None
    _, labels = max(found, key=lambda x: x[0])

    def names(key: str) -> tuple[str, ...]:
        return tuple(sorted(a for a in labels.get(key, "").split(",") if a))

    return names("running_lora_adapters"), names("waiting_lora_adapters")


def lora_line(name: str, adapters: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    running, waiting = adapters
    return f"  {name}: running {', '.join(running) or '-'}; waiting {', '.join(waiting) or '-'}"
