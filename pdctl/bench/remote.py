"""`pdctl bench` and the canary on a running hosts deployment (I/O).

Everything goes through the target's observer that `pdctl top` reads through
(pdctl.top.source.Source over targets/hosts/observe.py): `vllm bench serve` runs on a host
that runs an engine (vLLM is installed there, in the engines' environment), /metrics and the
canary's requests go through SSH port forwarding, the API key (secrets.apiKey) is read from
the deployment's 0600 secrets file and sent in a header, never on a command line."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from pdctl.bench import canary as check
from pdctl.bench import load
from pdctl.bench.report import engine_flags
from pdctl.bench.stall import StallWatch, keep, stall_note, stop_command
from pdctl.errors import PdctlError, UsageError
from pdctl.plan.model import ENGINE_ROLES
from pdctl.render.host import start_env, with_setup
from pdctl.targets import capabilities
from pdctl.targets.base import Connect, Endpoint
from pdctl.targets.state import desired_units
from pdctl.top.kv_events import (
    KvEvent,
    as_dicts,
    counter_events,
    new_lines,
    peers_of,
    scan,
    summary,
)
from pdctl.top.source import open_source
from pdctl.top.window import as_dict, figures


@dataclass
class Bench:
    """A bench session on one deployment: `open()`, the steps and the canary, `close()`."""

    plan: Any
    bundle: Any
    options: Any
    instance: str | None = None
    source: Any = None

    def open(self) -> Bench:
        if not capabilities(self.plan, Connect(ssh=self.options)).commands:
            raise UsageError(
                f"pdctl bench drives SSH-hosts deployments; {self.plan.name} runs on "
                f"{self.plan.target}",
                fix="run `vllm bench serve` against the gateway from a pod (docs/bench.md)",
            )
        self.source = open_source(self.plan, self.bundle, Connect(ssh=self.options))
        # the observer's own request, and (capabilities.commands) run, folder, api_key
        if self.source.unreachable:
            self.close()
            raise PdctlError("cannot reach " + "; ".join(self.source.unreachable.values()))
        return self

    def close(self) -> None:
        if self.source is not None:
            self.source.close()

    # ------------------------------------------------------------------ where
    def units(self) -> list[Any]:
        return desired_units(self.plan, self.bundle)

    def target(self) -> Any:
        """The unit requests go to: the router, else the one serve engine (or --instance)."""
        units = [u for u in self.units() if u.port and u.role in ("router", "serve")]
        if self.instance is not None:
            found = [u for u in self.units() if u.name == self.instance and u.port]
            if not found:
                raise UsageError(
                    f"--instance {self.instance}: no such unit with a port in {self.plan.name}",
                    fix="one of: " + ", ".join(u.name for u in units),
                )
            return found[0]
        routers = [u for u in units if u.role == "router"]
        if routers:
            return routers[0]
        if len(units) != 1:
            raise UsageError(
                f"{self.plan.name} has {len(units)} serve instances and no router",
                fix="pick one with --instance: " + ", ".join(u.name for u in units),
            )
        return units[0]

    def driver(self) -> Any:
        """The engine unit whose host runs `vllm bench serve` (the target's host first)."""
        want = self.target().host.name
        units = sorted(
            (u for u in self.plan.units if u.role in ENGINE_ROLES and not u.leader),
            key=lambda u: u.host.name != want,
        )
        for u in units:
            if u.image is None:
                return with_setup(self.plan, u)
        raise UsageError(
            f"{self.plan.name}: every engine runs in a container; pdctl bench runs vLLM's "
            "load generator from a host's venv, conda or system Python",
            fix="run `vllm bench serve` inside the engine image (docs/bench.md)",
        )

    def base_url(self, driver: Any) -> str:
        t = self.target()
        where = t.address if t.host.name == driver.host.name else t.host.address
        return f"http://{where}:{t.port}"

    # ------------------------------------------------------------------ facts
    def engines(self) -> list[dict[str, Any]]:
        """Each engine: role, host, flags (its command line) and version (GET /version)."""
        out = []
        for inst in self.plan.instances:
            if inst.host is None or inst.role not in ENGINE_ROLES:
                continue
            got = self.source.request(
                Endpoint(inst.name, inst.role, inst.host.name, inst.port), "/version"
            )
            try:  # the engine still answers /metrics; the version is a nicety
                version = json.loads(got.text).get("version") if got.status == 200 else None
            except (ValueError, AttributeError):
                version = None
            out.append(
                {
                    "name": inst.name, "role": inst.role, "host": inst.host.name,
                    "address": inst.host.address, "version": version,
                    "flags": engine_flags(inst.args),
                }
            )
        return out

    # ------------------------------------------------------------------ load
    def step(self, w: load.Workload, step: load.Step, timeout: float) -> dict[str, Any]:
        """Run one step; its measured figures and what /metrics saw meanwhile."""
        drv = self.driver()
        folder = self.source.folder(drv.host.name)
        work = f"{folder}/bench-{os.getpid()}-{int(time.time())}"
        args = load.bench_args(
            w, step, self.base_url(drv), self.plan.served_name, self.plan.spec.model.name, work
        )
        text = load.script(drv.setup, start_env(drv), f"{folder}/secrets.env", args, work)
        logs = self.source.logs()
        first = self.source.scrape()
        peaks: dict[str, dict[str, float]] = {}
        recent: dict[str, list[Any]] = {}  # each engine's last samples, for stall_note
        spec, peers, watch = self.plan.spec, peers_of(self.plan), StallWatch()

        def stalled() -> str:
            return stall_note(recent, self.source.endpoints, spec.name, spec.phase, peers)

        lines = Timelines(first, {e.name: e for e in self.source.endpoints})
        gpu_box: list[Any] = []
        done = threading.Event()

        def sample() -> None:
            # every ~2 s while the step runs: the engines' peaks and timelines, and the busiest
            # GPU sample (one taken once at the start saw the GPU before the load reached it)
            while not done.wait(1.0):
                scrape = self.source.scrape()
                keep(recent, scrape)
                if watch.see(stalled(), time.monotonic()):  # no KV for STALL_STOP_S: stop it
                    try:
                        self.source.run(drv.host.name, stop_command(work), 30,
                                        "stopping a step whose KV transfer stalled")
                    except PdctlError:  # the step's own timeout still ends it
                        pass
                for name, snap in scrape.items():
                    row = peaks.setdefault(name, {})
                    for fig, v in lines.add(name, snap).items():
                        if v is not None and fig in ("kv_usage", "running", "waiting"):
                            row[fig] = max(row.get(fig, 0.0), v)
                got = self.source.gpus(1.0)
                if not gpu_box or busy(got[0]) > busy(gpu_box[0][0]):
                    gpu_box[:] = [got]

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        failed: PdctlError | None = None
        try:
            res = self.source.run(drv.host.name, text, timeout, f"vllm bench serve ({step.label})")
        except PdctlError as exc:
            failed = exc
        finally:
            done.set()
            sampler.join(timeout=30)
        if failed is not None:  # its timeout: say why the requests never ended, where known
            raise PdctlError(f"{failed}{stalled()}") from None
        last = self.source.scrape()
        if res.rc != 0 or load.MARK not in res.out:
            what = (
                f"stopped after {watch.stop_s:.0f} s in which requests waited for KV and none "
                "arrived" if watch.stopped
                else f"exited {res.rc}: " + " ".join(res.err.strip().splitlines()[-3:])[-400:]
            )
            raise PdctlError(f"{drv.host.name}: vllm bench serve ({step.label}) {what}{stalled()}")
        result = json.loads(res.out.split(load.MARK, 1)[1])
        if not gpu_box:  # a step shorter than one sample: the GPUs as the step ended
            gpu_box.append(self.source.gpus(1.0))
        gpus, missing = gpu_box[0]
        window = as_dict(self.source.window(first, last, gpus, missing))
        for row in window["instances"]:
            row["peak"] = peaks.get(row["name"], {})
            row["timeline"] = lines.of(row["name"])
        events = self.kv_events(logs, first, last)
        return {
            "load": step.label, "driver": drv.host.name, "measured": load.measured(result),
            "metrics": window, "kvEvents": as_dicts(events), "failures": summary(events),
        }

    def kv_events(self, logs: dict[str, str], first: dict[str, Any], last: dict[str, Any]
                  ) -> list[KvEvent]:
        """The suspect KV events since `logs` (every engine's log tail) and `first` (its
        /metrics): what each engine logged meanwhile, and its connector error counters that
        grew (prefill's too: NIXL counts an expired lease there)."""
        after = self.source.logs()
        names, peers = self.source.names(), peers_of(self.plan)
        events: list[KvEvent] = []
        for e in self.source.endpoints:
            if e.role == "router":
                continue
            text = new_lines(logs.get(e.name, ""), after.get(e.name, ""))
            events += scan(e.name, e.role, text, names, peers)
            if e.name in first and e.name in last:
                f = figures(e.name, e.role, e.where, first[e.name], last[e.name])
                events += counter_events(f, peers)
        return events

    # ------------------------------------------------------------------ canary
    def canary(
        self, n_prompts: int, tokens: int, seed: int, timeout: float, token_ids: bool = False
    ) -> check.Verdict:
        """The canary through the router and through the first prefill engine alone."""
        router = next((u for u in self.units() if u.role == "router" and u.port), None)
        prefill = next(
            (i for i in self.plan.instances if i.role == "prefill" and i.host is not None), None
        )
        if router is None or prefill is None:
            raise UsageError(
                f"{self.plan.name}: the canary compares the P/D path with one engine; it needs "
                "a router and a prefill engine (phases 2 and 3 on hosts)"
            )

        via_router = Endpoint(router.name, "router", router.host.name, router.port, router.address)
        alone_at = Endpoint(prefill.name, "prefill", prefill.host.name, prefill.port)
        key = self.source.api_key(prefill.host.name)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        names = self.source.names()
        texts = check.prompts(n_prompts, seed, f"run {os.urandom(4).hex()}")
        logs = self.source.logs()
        first = self.source.scrape()
        via, alone = [], []
        stuck: str | None = None  # the P/D path gave no answer: the later prompts skip it
        for text in texts:
            body = check.payload(self.plan.served_name, text, tokens, seed, token_ids)
            if stuck is None:
                via.append(self._ask(via_router, body, {}, timeout))
                if (via[-1].error or "").startswith("no answer"):
                    stuck = f"not asked (no answer to an earlier prompt in {timeout:.0f} s)"
            else:
                via.append(check.Answer(error=stuck))
            alone.append(self._ask(alone_at, body, headers, timeout))
        last = self.source.scrape()
        kv = 0.0
        errors: dict[str, float] = {}
        for e in self.source.endpoints:
            if e.role not in ("prefill", "decode"):
                continue
            f = figures(e.name, e.role, e.where, first[e.name], last[e.name])
            if e.role == "decode":
                kv += f.kv_tokens_received or 0.0
            for k, v in f.connector_errors.items():
                errors[k] = errors.get(k, 0.0) + v
        events = self.kv_events(logs, first, last)
        roles: dict[str, list[str]] = {}
        for i in self.plan.instances:
            roles.setdefault(i.role, []).append(i.name)
        pre, dec = roles.get("prefill", []), roles.get("decode", [])
        engines = (
            f"{pre[0]} -> {dec[0]}"
            if len(pre) == 1 and len(dec) == 1
            else f"router (prefill {', '.join(pre)}; decode {', '.join(dec)})"
        )
        return check.judge(via, alone, tokens, names, prefill.name, kv, errors, engines, events)

    def _ask(
        self, e: Any, body: dict[str, Any], headers: dict[str, str], timeout: float
    ) -> check.Answer:
        got = self.source.request(
            e, "/v1/completions", "POST", json.dumps(body).encode(),
            {"Content-Type": "application/json", **headers}, timeout,
        )
        if got.status == 0:  # refused, reset, timed out: the canary fails on it
            why = got.text.removeprefix("/v1/completions: no answer (").removesuffix(")")
            return check.Answer(error=f"no answer from {e.address}:{e.port} ({why})")
        try:
            return check.answer_of(got.status, json.loads(got.text))
        except ValueError:
            return check.answer_of(got.status, got.text)


class Timelines:
    """Each engine's /metrics samples over a step, as the report keeps them (docs/bench.md):
    seconds since the step's first scrape, running and waiting requests, KV cache usage (0-1)
    and the prompt tokens received over the KV connector since the step began."""

    FIELDS = ("t", "running", "waiting", "kvUsage", "kvReceived")

    def __init__(self, first: dict[str, Any], endpoints: dict[str, Any]) -> None:
        self.first, self.endpoints = first, endpoints
        self.series: dict[str, dict[str, list[float | None]]] = {}

    def add(self, name: str, snap: Any) -> dict[str, float | None]:
        """Record one sample of `name`; its gauges by top's figure names (None: not there)."""
        base, e = self.first.get(name), self.endpoints.get(name)
        if snap.error or base is None or base.error or e is None:
            return {}
        got: dict[str, float | None] = {}
        for fig in ("running", "waiting", "kv_usage"):
            metric = snap.pick(fig)
            got[fig] = snap.total(metric) if metric else None
        received = figures(name, e.role, e.where, base, snap).kv_tokens_received
        row = self.series.setdefault(name, {k: [] for k in self.FIELDS})
        for key, v in zip(self.FIELDS, (round(snap.at - base.at, 2), got["running"],
                                        got["waiting"], got["kv_usage"], received),
                          strict=True):
            row[key].append(v)
        return got

    def of(self, name: str) -> dict[str, list[float | None]]:
        return self.series.get(name, {k: [] for k in self.FIELDS})


def busy(gpus: list[Any]) -> float:
    """How busy a GPU sample is: the highest SM activity (else utilization) among its GPUs."""
    return max(
        ((g.sm_util if g.sm_util is not None else g.util_gpu) or 0.0 for g in gpus), default=0.0
    )
