"""`pdctl adapters`: list, load and unload LoRA adapters on every engine of a hosts deployment
through vLLM's own API (GET /v1/models, POST /v1/load_lora_adapter and
/v1/unload_lora_adapter), reached through the target's observer (on hosts an SSH channel to
each engine's port, as the health probe does). docs/lora.md."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from pdctl.targets import open_target
from pdctl.targets.base import Connect, Endpoint


@dataclass(frozen=True)
class Answer:
    """One engine's answer: `status` 0 when it did not answer (`text` says why)."""

    engine: str
    role: str
    host: str
    status: int
    text: str

    @property
    def ok(self) -> bool:
        return self.status == 200


def call_engines(
    plan: Any, bundle: Any, options: Any, parallel: int, method: str, path: str,
    body: dict[str, str] | None = None, api_key: str | None = None,
) -> tuple[list[Answer], dict[str, str]]:
    """`method path` on every engine (not the router: in P/D both prefill and decode must
    hold an adapter, so each is called itself); (answers, unreachable hosts -> why)."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = json.dumps(body).encode() if body is not None else b""
    seen = open_target(plan, bundle, Connect(ssh=options, parallel=parallel)).observe()
    try:

        def one(e: Endpoint) -> Answer:
            got = seen.request(e, path, method, data, headers, timeout=120.0)
            text = got.text.removeprefix(f"{path}: ") if got.status == 0 else got.text.strip()
            return Answer(e.name, e.role, e.where, got.status, text)

        engines = [e for e in seen.endpoints if e.role != "router"]
        with ThreadPoolExecutor(max(1, min(parallel, len(engines)))) as pool:
            return list(pool.map(one, engines)), dict(seen.unreachable)
    finally:
        seen.close()


def listed_adapters(body: str, served: str) -> list[str]:
    """The adapters in a /v1/models answer: every model but the served one (vLLM lists an
    adapter with its base model as `parent`)."""
    try:
        data = json.loads(body).get("data", [])
    except (ValueError, AttributeError):
        return []
    return sorted(str(m.get("id")) for m in data if isinstance(m, dict) and m.get("id") != served)


def reason(text: str) -> str:
    """vLLM's error message out of its JSON error body (or the text itself)."""
    try:
        data = json.loads(text)
    except ValueError:
        return text[:300]
    err = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(err, dict):
        return str(err.get("message") or err.get("detail") or err)[:300]
    return str(err)[:300]
