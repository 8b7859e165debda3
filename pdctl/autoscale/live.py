"""`pdctl autoscale` on hosts, its pure parts (docs/autoscaling.md, "pdctl autoscale"): the
policy's rules from the plan's targets, one window of the engines' figures (what `pdctl top`
reads) -> the policy's inputs, the decisions -> the scale steps, and each decision's evidence
(one line, or one JSON object)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pdctl.autoscale.policy import Decision, RoleRule
from pdctl.plan.autoscale import RoleTarget


@dataclass(frozen=True)
class Seen:
    """One engine's figures over the window (top.window.Figures, read by duck typing)."""

    role: str
    waiting: float | None = None
    running: float | None = None
    kv_usage: float | None = None
    request_rate: float | None = None
    max_num_seqs: int | None = None
    error: str | None = None


def rules(targets: Iterable[RoleTarget]) -> tuple[RoleRule, ...]:
    """The policy's rule of each role under `autoscaling` (bounds, target, cooldowns)."""
    return tuple(
        RoleRule(t.role, t.metric, t.target, t.min_replicas, t.max_replicas,
                 t.gpus_per_instance, float(t.scale_up_s), float(t.scale_down_s))
        for t in targets
    )


METRIC = {"waiting": "waiting", "kvUsage": "kv_usage", "requestRate": "request_rate"}


def observed(
    rules: Sequence[RoleRule], engines: Iterable[Any]
) -> tuple[dict[str, float], dict[str, float], dict[str, dict[str, float]]]:
    """Per role: the rule's metric summed over the engines that answered (what `decide`
    takes), their busy fractions summed (running / max-num-seqs, where the plan knows the
    batch limit), and the evidence (every figure summed, `answered` and `silent` counts)."""
    metric = {r.role: METRIC[r.metric] for r in rules}
    sums: dict[str, float] = {}
    busy: dict[str, float] = {}
    seen: dict[str, dict[str, float]] = {}
    for e in engines:
        if e.role not in metric:
            continue
        row = seen.setdefault(e.role, {"answered": 0, "silent": 0})
        if e.error:
            row["silent"] += 1
            continue
        row["answered"] += 1
        for key in ("waiting", "running", "kv_usage", "request_rate"):
            value = getattr(e, key)
            if value is not None:
                row[key] = row.get(key, 0.0) + value
        sums[e.role] = sums.get(e.role, 0.0) + (getattr(e, metric[e.role]) or 0.0)
        if e.max_num_seqs and e.running is not None:
            busy[e.role] = busy.get(e.role, 0.0) + min(1.0, e.running / e.max_num_seqs)
    for role, value in busy.items():
        seen[role]["busy"] = value
    return sums, busy, seen


def steps(decisions: Iterable[Decision]) -> list[Decision]:
    """The decisions to apply, scale-downs first (the GPUs they free count for scale-ups, as
    `decide` counted them)."""
    changed = [d for d in decisions if d.changed]
    return sorted(changed, key=lambda d: d.replicas > d.current)


def action(d: Decision) -> str:
    return "hold" if not d.changed else ("up" if d.replicas > d.current else "down")


def evidence(d: Decision, seen: dict[str, float], at: str) -> dict[str, Any]:
    """One decision and what it was decided on, as JSON-able data."""
    return {
        "at": at, "role": d.role, "action": action(d), "current": d.current,
        "desired": d.replicas, "reason": d.reason,
        "observed": {k: round(v, 4) for k, v in sorted(seen.items())},
    }


def line(doc: dict[str, Any]) -> str:
    """The evidence as one line: `<at> <role> <current> -> <desired> (<action>): <reason> |
    <figures summed over the role's engines>`."""
    seen = doc["observed"]
    parts = [f"waiting {seen.get('waiting', 0):g}", f"running {seen.get('running', 0):g}"]
    if "kv_usage" in seen:
        parts.append(f"kv {seen['kv_usage']:.0%}")
    if "request_rate" in seen:
        parts.append(f"{seen['request_rate']:.2f} req/s")
    if "busy" in seen:
        parts.append(f"busy {seen['busy']:.2f}")
    parts.append(f"{seen.get('answered', 0):g} answered")
    if seen.get("silent"):
        parts.append(f"{seen['silent']:g} not answering")
    move = f"{doc['current']} -> {doc['desired']} ({doc['action']})"
    return f"{doc['at']} {doc['role']} {move}: {doc['reason']} | {', '.join(parts)}"


def unit_text(name: str, command: Sequence[str], workdir: str) -> str:
    """A systemd unit that runs `command` (`pdctl autoscale SPEC ...`) supervised: restarted
    whenever it ends. Each argument single-quoted as systemd's ExecStart= reads quotes, `%`
    (a systemd specifier) doubled."""

    def quoted(arg: str) -> str:
        arg = arg.replace("%", "%%")
        if arg and all(c.isalnum() or c in "@+=:,./_-" for c in arg):
            return arg
        return "'" + arg.replace("\\", "\\\\").replace("'", "\\'") + "'"

    return "\n".join([
        "[Unit]",
        f"Description=pdctl autoscale {name}",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        f"WorkingDirectory={workdir.replace('%', '%%')}",  # taken as written, to the line's end
        "# the engines' secrets (e.g. HF_TOKEN=...), read when a scale-up starts an engine",
        "EnvironmentFile=-%h/.config/pdctl/autoscale.env",
        "ExecStart=" + " ".join(quoted(a) for a in command),
        "Restart=always",
        "RestartSec=10",
        "",
        "[Install]",
        "WantedBy=default.target",
        "",
    ])
