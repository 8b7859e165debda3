"""Supervision of a process unit (runtimes conda and venv): the systemd unit file that keeps it
running, its backoff drop-in, serve.sh (ExecStart: the server in the foreground) and halt.sh
(ExecStop), and the bounded log of the nohup mode. See docs/phase0-hosts.md."""

from __future__ import annotations

from pdctl.plan.model import Plan, Unit
from pdctl.render.bundle import Artifact
from pdctl.render.template import render_template

RESTART_SEC = 10  # first wait before a restart
RESTART_STEPS = 5  # systemd >= 254: the wait grows in this many steps ...
RESTART_MAX_DELAY = 300  # ... up to this many seconds
START_LIMIT_INTERVAL = 900  # at most START_LIMIT_BURST starts in this many seconds
START_LIMIT_BURST = 5
STOP_TIMEOUT = 60  # halt.sh's grace (GRACE_SECONDS) and a margin, then SIGKILL
UNITS_PATHS = "/etc/systemd/system/<name> (root) or ~/.config/systemd/user/<name>"

_SIZE = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def service_name(plan: Plan, unit: Unit) -> str:
    return f"pdctl-{plan.name}-{unit.name}.service"


def supervised(unit: Unit) -> bool:
    """A process unit whose start.sh may install a systemd unit (not `supervise: none`)."""
    return unit.image is None and unit.host.supervise != "none"


def unit_path(path: str) -> str:
    """A host path as a unit file writes it: `~/` is the user's home (%h), `%` doubled."""
    path = path.replace("%", "%%")
    return "%h" + path[1:] if path == "~" or path.startswith("~/") else path


def log_limits(unit: Unit) -> dict[str, object]:
    """The nohup'd log's rotation, from logMaxSize and logMaxFiles."""
    size = unit.host.log_max_size
    files = unit.host.log_max_files
    names = ["log"] + [f"log.{i}" for i in range(1, files)]
    shown = ", ".join(names) if files <= 3 else f"log, log.1 ... log.{files - 1}"
    return dict(
        log_max_size=size, log_bytes=int(size[:-1]) * _SIZE[size[-1]], log_files=files,
        log_files_list=shown,
    )


def supervise_vars(plan: Plan, unit: Unit) -> dict[str, object]:
    """What process-start.sh.j2 and process-stop.sh.j2 need to know of supervision."""
    return dict(
        supervise=unit.host.supervise if unit.image is None else "none",
        service=service_name(plan, unit), systemd=supervised(unit), **log_limits(unit),
    )


def _ordering(plan: Plan, unit: Unit) -> tuple[list[str], list[str]]:
    """Units of the same host that start before (After=) and after (Before=) this one, by the
    plan's stages: a Mooncake master before the engines that register with it, the engines
    before the router that waits for them."""
    mine = [u for u in plan.units if u.host.name == unit.host.name and u.name != unit.name]
    after = [service_name(plan, u) for u in mine if u.stage < unit.stage and supervised(u)]
    before = [service_name(plan, u) for u in mine if u.stage > unit.stage and supervised(u)]
    return after, before


def supervise_files(
    plan: Plan, unit: Unit, header: list[str], common: dict[str, object], env: object
) -> tuple[Artifact, ...]:
    """The unit file, its backoff drop-in, serve.sh and halt.sh of a supervised unit."""
    if not supervised(unit):
        return ()
    base = f"hosts/{unit.host.name}/{unit.name}"
    service = service_name(plan, unit)
    deploy = unit_path(str(common["deploy_dir"]))
    after, before = _ordering(plan, unit)
    text = render_template(
        "systemd.service.j2", header=header, scope_paths=UNITS_PATHS.replace("<name>", service),
        service=service, deployment=plan.name, unit=unit.name, role=unit.role, after=after,
        before=before, interval=START_LIMIT_INTERVAL, burst=START_LIMIT_BURST,
        unit_dir=f"{deploy}/{unit.name}", deploy_dir=deploy, restart_sec=RESTART_SEC,
        stop_timeout=STOP_TIMEOUT,
    )
    backoff = render_template(
        "systemd-backoff.conf.j2", service=service, steps=RESTART_STEPS, max_delay=RESTART_MAX_DELAY
    )
    serve = render_template(
        "process-serve.sh.j2", header=header, setup=unit.setup, env=env, command=unit.command,
        **common,
    )
    halt = render_template("process-stop.sh.j2", header=header, systemd=False, **common)
    return (
        Artifact(f"{base}/{service}", text), Artifact(f"{base}/backoff.conf", backoff),
        Artifact(f"{base}/serve.sh", serve, executable=True),
        Artifact(f"{base}/halt.sh", halt, executable=True),
    )
