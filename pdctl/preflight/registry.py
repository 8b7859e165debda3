"""The preflight topics, in one table, and what runs them all: the commands a host gets, the
gathering (commands over SSH or locally, then the topics' own probes, then the cluster), the
HostFacts of a host's outputs and the findings of a plan.

A topic (pdctl/preflight/<topic>.py) holds its commands, its parsers and its checks, pure, and
its probe where it does more than run commands (group: the reach across hosts; transfer: the
agents). tests/test_layers.py holds every part but the probes to purity."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from pdctl.plan.model import Plan
from pdctl.plan.topology import plan_hosts
from pdctl.preflight import bundle, cluster, fit, gpu, group, hami, host, transfer
from pdctl.preflight.facts import CLUSTER, PARSE_ERRORS, SSH, Facts, HostFacts, Missing
from pdctl.preflight.finding import Finding, HostCheck, PlanCheck
from pdctl.preflight.run import Options, Step, run_local, run_ssh
from pdctl.spec.model import Host, Spec

Commands = Callable[[Spec, Host], dict[str, str]]
Fields = Callable[[dict[str, str]], tuple[dict[str, Any], list[Missing]]]
Probe = Callable[[Plan, Options, dict[str, dict[str, str]], Callable[[Host], bool], Step | None],
                 dict[str, dict[str, str]]]


@dataclass(frozen=True)
class Topic:
    name: str
    commands: Commands | None = None  # pure: (spec, host) -> {file: shell command}
    parsers: Mapping[str, Callable[[str], object]] = field(default_factory=dict)  # pure
    fields: Fields | None = None  # pure: a host's outputs -> HostFacts fields, what is missing
    check_host: Callable[[HostCheck], list[Finding]] | None = None  # pure: one host
    check: Callable[[PlanCheck], list[Finding]] | None = None  # pure: the whole plan
    probe: Probe | None = None  # I/O past the commands: runs after every host's commands


# In order: the commands run, and the findings come, in this order.
TOPICS = (Topic("gpu", gpu.commands, gpu.PARSERS, gpu.fields, gpu.check_host),
          Topic("host", host.commands, host.PARSERS, host.fields, host.check_host),
          Topic("hami", hami.commands, fields=hami.fields, check_host=hami.check_host),
          Topic("cluster", check=cluster.check),
          Topic("group", group.commands, fields=group.fields, check=group.check, probe=group.probe),
          Topic("transfer", transfer.commands, fields=transfer.fields, check=transfer.check,
                probe=transfer.probe),
          Topic("fit", check=fit.check),
          # findings only with `preflight --bundle` (the manifest's wants): cli/preflight_cmd.py
          Topic("bundle", bundle.commands, bundle.PARSERS))

LOCAL_ADDRESSES = ("localhost",)


def commands(spec: Spec, h: Host) -> dict[str, str]:
    """file name -> shell command, in the order they run. The same commands run locally and
    over SSH; no Python is needed on the host."""
    out: dict[str, str] = {}
    for t in TOPICS:
        if t.commands is not None:
            out.update(t.commands(spec, h))
    return out


def host_facts(name: str, raw: dict[str, str]) -> HostFacts:
    """Everything `raw` (file name -> output; a failed command as `<name>.err`, 'exit N' and
    its stderr; an unreachable host as `ssh.err`) tells about host `name`; absent facts stay
    None with a reason. An output its parser cannot read is left out and named in `missing`,
    never an exception."""
    if SSH in raw:
        return HostFacts(name=name, error=raw[SSH].strip() or "unreachable")
    unreadable = []
    for t in TOPICS:
        for file, parse in t.parsers.items():
            if raw.get(file):
                try:
                    parse(raw[file])
                except PARSE_ERRORS as exc:
                    unreadable.append(Missing(file, f"unreadable output ({type(exc).__name__})"))
    if unreadable:
        raw = {k: v for k, v in raw.items() if k not in {m.name for m in unreadable}}
    values: dict[str, Any] = {}
    missing: list[Missing] = []
    try:
        for t in TOPICS:
            if t.fields is not None:
                found, lacking = t.fields(raw)
                values.update(found)
                missing += lacking
    except PARSE_ERRORS as exc:  # the outputs parse one by one but do not fit together
        return HostFacts(name=name, error=f"recorded outputs do not fit together ({exc!r:.200})")
    return HostFacts(name=name, **values, missing=tuple(missing + unreadable))


def facts_from(raw: dict[str, dict[str, str]]) -> Facts:
    """Facts from raw outputs per folder (host name, or `_kubernetes` for the cluster)."""
    hosts = tuple(host_facts(name, files) for name, files in sorted(raw.items()) if name != CLUSTER)
    found = cluster.cluster_facts(raw[CLUSTER]) if CLUSTER in raw else None
    return Facts(hosts=hosts, cluster=found)


def is_local(h: Host, options: Options) -> bool:
    return h.name in options.local or h.address in LOCAL_ADDRESSES


def steps(plan: Plan, options: Options) -> dict[str, int]:
    """How many steps each host (and the cluster) takes, for a progress display."""
    out = {}
    for h in plan_hosts(plan):
        out[h.name] = len(commands(plan.spec, h)) + (1 if is_local(h, options) else 0)
    if options.transfer is not None:
        for pair in transfer.pairs(plan):
            assert pair.prefill.host is not None
            out[pair.prefill.host.name] = out.get(pair.prefill.host.name, 0) + 1
    if plan.on_kubernetes:
        out[CLUSTER] = 1
    return out


def gather(plan: Plan, options: Options, step: Step | None = None) -> dict[str, dict[str, str]]:
    """Raw outputs per host folder (and `_kubernetes` for a cluster)."""
    hosts = plan_hosts(plan)
    out: dict[str, dict[str, str]] = {}

    def one(h: Host) -> tuple[str, dict[str, str]]:
        cmds = commands(plan.spec, h)
        if is_local(h, options):  # NVML first (no driver is a recorded answer)
            raw = {gpu.NVML: gpu.dump()}
            if step:
                step(h.name, gpu.NVML)
            return h.name, raw | run_local(h.name, cmds, options, step)
        return h.name, run_ssh(h, cmds, options, step)

    if hosts:
        workers = max(1, min(options.concurrency, len(hosts)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for name, raw in pool.map(one, hosts):
                out[name] = raw
        local = lambda h: is_local(h, options)  # noqa: E731
        for t in TOPICS:
            if t.probe is not None:
                for name, files in t.probe(plan, options, out, local, step).items():
                    out[name].update(files)
    if plan.on_kubernetes:
        out[CLUSTER] = cluster.gather(options.kubeconfig, options.context)
        if step:
            step(CLUSTER, "cluster")
    return out


def run_checks(
    plan: Plan, facts: Facts, hf_config: dict[str, Any] | None = None, transfer: bool = True
) -> tuple[Finding, ...]:
    """Every finding for the plan: each host's (reached first), then the whole plan's (the
    cluster, multi-node groups, the network preflight's transfers (`transfer=False`: none was run,
    say nothing of them; model fit last)."""
    model, why = fit.model_of(plan, hf_config)
    weights = fit.weights_total(plan, model) if model is not None else None
    out: list[Finding] = []
    for h in plan_hosts(plan):
        index = next(i for i, x in enumerate(plan.spec.hosts) if x.name == h.name)
        hf = facts.host(h.name)
        found = host.reach(h, hf)
        if found or hf is None:
            out += found
            continue
        insts = [i for i in plan.instances if i.host is not None and i.host.name == h.name]
        on = HostCheck(plan, h, hf, insts, index, weights)
        for t in TOPICS:
            if t.check_host is not None:
                out += t.check_host(on)
    whole = PlanCheck(plan, facts, model, why, transfer)
    for t in TOPICS:
        if t.check is not None:
            out += t.check(whole)
    return tuple(out)
