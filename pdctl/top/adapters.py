"""`pdctl adapters`: list, load and unload LoRA adapters on every engine of a hosts deployment
through vLLM's own API (GET /v1/models, POST /v1/load_lora_adapter and
/v1/unload_lora_adapter), reached over the SSH connections `status` and `top` use
(an SSH channel to each engine's port, as the health probe does). docs/lora.md."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pdctl.targets.health import http_request, unanswered
from pdctl.top.source import Endpoint, host_endpoints


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


def engines(plan: Any, bundle: Any) -> list[Endpoint]:
    """Every engine with a port (not the router: in P/D both prefill and decode must hold an
    adapter, so each is called itself)."""
    return [e for e in host_endpoints(plan, bundle) if e.role != "router"]


def call_engines(
    plan: Any,
    bundle: Any,
    options: Any,
    parallel: int,
    method: str,
    path: str,
    body: dict[str, str] | None = None,
    api_key: str | None = None,
) -> tuple[list[Answer], dict[str, str]]:
    """`method path` on every engine; (answers, unreachable hosts -> why)."""
    from pdctl.targets.hosts.fleet import fleet_of

    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    data = json.dumps(body).encode() if body is not None else b""
    fleet = fleet_of(plan, bundle, options, parallel)
    fleet.connect(tolerate=True)
    try:

        def one(e: Endpoint) -> Answer:
            ops = fleet.ops.get(e.where)
            if ops is None:
                return Answer(e.name, e.role, e.where, 0, f"host {e.where} unreachable")
            try:
                channel = ops.conn.open_channel(e.port, e.address)
                status, text = http_request(
                    channel, method, path, data, timeout=120.0, headers=headers
                )
            except Exception as exc:  # refused, reset, timeout, host lost
                why = unanswered(exc, f"{e.address}:{e.port} on {e.where}")
                return Answer(e.name, e.role, e.where, 0, f"no answer ({why})")
            return Answer(e.name, e.role, e.where, status, text.strip())

        return fleet.map(one, engines(plan, bundle)), dict(fleet.unreachable)
    finally:
        fleet.close()


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
