"""Phase 3 on hosts: HAMi-core's library on every host that runs a sliced decode engine. Pure.

What can be told from the file and the host's facts, and its limits:
- it exists and is readable (else every decode engine's start.sh stops);
- it exports the hooks that cap memory (`nm -D`, or pdctl's own read of `.dynsym`): a build with
  hidden symbols (a plain CMake Release build) preloads fine and limits nothing;
- the CUDA it was built for: HAMi-core links `libcuda.so.1` and `libnvidia-ml.so.1` only (no
  versioned cudart), so the one build-time mark is in its exports: hooks it compiles only
  against CUDA < 13 headers (cuCtxCreate_v2/_v3). That tells 12-or-older from 13-or-newer and
  nothing finer. It must match the engine's CUDA major (vLLM's wheels: the runtime whose calls
  HAMi-core intercepts); a driver older than CUDA 13 cannot serve a 13 build. A 12 build under a
  CUDA 13 driver is fine as long as the engine is CUDA 12.
"""

from __future__ import annotations

from pdctl.check.finding import Finding
from pdctl.facts.hami import HOOKS, HamiLibrary
from pdctl.facts.model import HostFacts
from pdctl.plan.model import Instance, Plan
from pdctl.spec.model import Host

BUILD = "build it with HAMi-core's build.sh (a Debug build with -DDLSYM_HOOK_ENABLE=1)"


def sliced(instances: list[Instance]) -> list[Instance]:
    """The host's decode engines that run under HAMi-core."""
    return [i for i in instances if any(k == "LD_PRELOAD" for k, _ in i.env)]


def hami_library(host: Host, hf: HostFacts, plan: Plan, instances: list[Instance]) -> list[Finding]:
    if not sliced(instances):
        return []
    share = plan.spec.decode.share if plan.spec.decode is not None else None
    path = share.library if share is not None and share.library else "?"
    lib: HamiLibrary | None = hf.hami
    if lib is None:
        return [
            Finding(
                "WARN",
                "hami.library",
                host.name,
                "HAMi-core library: not gathered",
                f"{path} readable, exporting {', '.join(HOOKS)}",
                "gather it live, or record it with --record",
            )
        ]
    if not lib.exists:
        return [
            Finding(
                "FAIL",
                "hami.library",
                host.name,
                f"no file {lib.path}",
                "HAMi-core's libvgpu.so at decode.share.library",
                f"copy libvgpu.so there ({BUILD}), or fix decode.share.library",
            )
        ]
    if not lib.readable:
        return [
            Finding(
                "FAIL",
                "hami.library",
                host.name,
                f"{lib.path} is not readable",
                "a file the SSH user can read",
                f"chmod a+r {lib.path}",
            )
        ]
    if lib.symbols is None:
        return [
            Finding(
                "FAIL",
                "hami.library",
                host.name,
                f"{lib.path}: {lib.error or 'exports unreadable'}",
                "an ELF shared object (libvgpu.so)",
                f"point decode.share.library at libvgpu.so ({BUILD})",
            )
        ]
    missing = lib.missing_hooks
    if missing:
        return [
            Finding(
                "FAIL",
                "hami.hooks",
                host.name,
                f"{lib.path} exports none of {', '.join(missing)}"
                if len(missing) == len(HOOKS)
                else f"{lib.path} lacks {', '.join(missing)}",
                f"exported {', '.join(HOOKS)} (else the preload caps nothing)",
                f"rebuild: a build with hidden symbols (CMake Release) limits nothing; {BUILD}",
            )
        ]
    out = [
        Finding(
            "PASS",
            "hami.hooks",
            host.name,
            f"{lib.path} exports {', '.join(HOOKS)} ({lib.how})",
            "the memory hooks",
        )
    ]
    return out + cuda_match(host, hf, plan, lib)


def _major(version: str) -> int | None:
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def cuda_match(host: Host, hf: HostFacts, plan: Plan, lib: HamiLibrary) -> list[Finding]:
    engine = plan.release.cuda_major
    driver = _major(hf.cuda)
    built = lib.cuda_headers
    want = f"built for CUDA {engine} (vLLM {plan.release.version}'s wheels)"
    if driver is not None:
        want += f", driver CUDA {hf.cuda}"
    if not built:
        return [Finding("WARN", "hami.cuda", host.name, "the library's CUDA is unknown", want)]
    found = f"built against CUDA {'12 or older' if built == '<13' else '13 or newer'} headers"
    wrong = []
    if (engine >= 13) != (built == ">=13"):
        wrong.append(f"the engine uses CUDA {engine}")
    if driver is not None and driver < 13 and built == ">=13":
        wrong.append(f"the driver is CUDA {hf.cuda}")  # a CUDA 12 libcuda lacks 13's calls
    if wrong:
        return [
            Finding(
                "FAIL",
                "hami.cuda",
                host.name,
                f"{found}; {' and '.join(wrong)}",
                want,
                f"rebuild HAMi-core on {host.name} against CUDA {engine} "
                "(CUDA_HOME=/usr/local/cuda-<version> sh build.sh)",
            )
        ]
    return [Finding("PASS", "hami.cuda", host.name, found, want)]
