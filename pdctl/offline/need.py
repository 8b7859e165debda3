"""What a plan's hosts install with pip, grouped by Python environment (pure)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from pdctl.compat import NIXL_PIP
from pdctl.errors import UsageError
from pdctl.plan.model import ENGINE_ROLES, Plan

# templates/setup-conda.sh.j2 creates a missing conda env with this Python.
CONDA_PYTHON = "3.11"


@dataclass(frozen=True)
class Need:
    """One Python environment's packages, resolved together by one `pip download`."""

    what: str  # "engine (venv)", "router", ...
    pips: tuple[str, ...]  # pinned requirements, e.g. ("vllm==0.23.0", "nixl==1.5.1")
    conda: bool = False  # a conda env (its Python is CONDA_PYTHON)
    # The hosts whose engines' environment it is (bundle.txt lists what it holds: --skip-
    # installed); () for a service's own venv, which no recording lists.
    hosts: tuple[str, ...] = ()


def canon(name: str) -> str:
    """A distribution's name as pip compares them (https://peps.python.org/pep-0503/#normalized-names)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def connector_pip(plan: Plan) -> str | None:
    """The KV connector's package the engines' environment installs (render/pd_host.kv_setup)."""
    if plan.shape is None:
        return None
    dis = plan.shape.dis
    if dis.connector == "mooncake":
        return plan.release.mooncake_pip(plan.spec.engine.device)
    if dis.connector == "nixl":
        return NIXL_PIP
    return None  # P2pNcclConnector ships inside vLLM


def needs(plan: Plan, weights: bool = False, images: bool = False,
          adapters: bool = False) -> tuple[Need, ...]:
    """Every environment the plan's start scripts would fill from a package index. Refuses
    what a bundle cannot carry (docker hosts without --images), and a spec that installs
    nothing (unless the bundle carries the model's weights or LoRA adapters)."""
    if plan.on_kubernetes:  # no wheels: the images go to a registry mirror (offline/images)
        if weights:
            raise UsageError("--weights: a Kubernetes spec reads the model from "
                             "kubernetes.storage, not from a bundle",
                             fix="leave out --weights (docs/offline.md)")
        return ()
    engines = [u for u in plan.units if u.role in ENGINE_ROLES]
    docker = sorted({u.host.name for u in engines if u.image is not None})
    if docker and not images:
        raise UsageError(
            f"pdctl bundle: host {docker[0]} has runtime docker: its engine image is bundled "
            f"only with --images",
            fix="add --images (the image must be in the local Docker engine: docker pull it)",
        )
    out: list[Need] = []
    runtimes = sorted({u.host.runtime for u in engines if u.image is None})
    # The engines' environment is installed only for CUDA engines (a CPU build is prepared
    # by hand: render/host.engine_setup), or conda's, which installs always.
    if "conda" in runtimes or plan.spec.engine.device == "cuda":
        pips = [plan.release.pip]
        kv = connector_pip(plan)
        if kv is not None:
            pips.append(kv)
        for runtime in runtimes:
            if runtime == "venv" and plan.spec.engine.device != "cuda":
                continue
            hosts = sorted({u.host.name for u in engines
                            if u.image is None and u.host.runtime == runtime})
            out.append(Need(f"engines ({runtime})", tuple(pips), runtime == "conda",
                            tuple(hosts)))
    for svc in plan.services:
        out.append(Need(svc.name, (svc.pip,)))
    if not out and not weights and not adapters and not docker:
        raise UsageError(
            "pdctl bundle: this spec installs nothing with pip (engine.device "
            f"{plan.spec.engine.device} on runtime venv uses an environment prepared by hand)",
            fix="bundle a spec whose hosts install vLLM (engine.device cuda, or runtime conda)",
        )
    return tuple(out)


def python_for(found: tuple[Need, ...], given: str | None) -> str:
    """The hosts' Python version (3.X): --python, else the conda envs' when every environment
    is one pdctl creates with conda."""
    if not found and given is None:
        return ""  # nothing to resolve: a bundle of weights only
    if given is not None:
        parts = given.split(".")
        if len(parts) != 2 or not all(p.isdigit() for p in parts) or parts[0] != "3":
            raise UsageError(f"--python: expected a version like 3.11 (got {given!r})")
        conda = [n.what for n in found if n.conda]
        if conda and given != CONDA_PYTHON:
            raise UsageError(
                f"--python {given}: the {conda[0]} run Python {CONDA_PYTHON} (the conda env "
                f"pdctl makes), one bundle resolves for one Python",
                fix=f"use --python {CONDA_PYTHON}, or bundle the venv hosts in a spec of their own",
            )
        return given
    if all(n.conda for n in found):
        return CONDA_PYTHON
    venvs = ", ".join(n.what for n in found if not n.conda)
    raise UsageError(
        f"--python: the hosts' Python version is not in the spec ({venvs} use the host's "
        f"python3)",
        fix="give it, e.g. --python 3.12 (run `python3 --version` on a host)",
    )


def platform_for(given: str | None, found: tuple[Need, ...] | None = None) -> str:
    if found == () and not given:
        return ""  # nothing to resolve: a bundle of weights only
    if not given:
        raise UsageError(
            "--platform: the hosts' platform is not in the spec",
            fix="give the wheel platform tag, e.g. --platform manylinux_2_28_x86_64 "
            "(glibc 2.28 or newer on x86_64: `ldd --version` on a host)",
        )
    if not all(c.isalnum() or c == "_" for c in given):
        raise UsageError(f"--platform: expected a wheel platform tag like "
                         f"manylinux_2_28_x86_64 (got {given!r})")
    return given
