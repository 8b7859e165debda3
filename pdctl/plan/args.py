"""`vllm serve` arguments for one instance, checked against the pinned version's flags."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from typing import Any

from pdctl.compat import Release
from pdctl.errors import SpecError
from pdctl.plan.lora import lora_args
from pdctl.plan.offload import check_offload_env, check_offload_flags, number_text, offload_args
from pdctl.spec.model import Spec
from pdctl.spec.speculative import Speculative


def engine_args(
    spec: Spec,
    release: Release,
    *,
    port: int,
    tensor_parallel: int,
    pipeline_parallel: int = 1,
    gpu_memory_utilization: float | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    enforce_eager: bool = False,
    enable_prefix_caching: bool | None = None,
    extra: Iterable[tuple[str, str]] = (),
    role_args: tuple[str, ...] = (),
    role_path: str = "serve",
    host: str = "0.0.0.0",
) -> tuple[str, ...]:
    """The serve arguments after `vllm serve` (the model is the positional first argument).

    `extra` holds (flag, value) pairs added by the plan (KV transfer etc.); value "" = a switch.
    """
    m = spec.model
    args: list[str] = [m.name, "--host", host, "--port", str(port)]
    if m.served_name:
        args += ["--served-model-name", m.served_name]
    if tensor_parallel > 1:
        args += ["--tensor-parallel-size", str(tensor_parallel)]
    if pipeline_parallel > 1:
        args += ["--pipeline-parallel-size", str(pipeline_parallel)]
    if gpu_memory_utilization is not None:
        args += ["--gpu-memory-utilization", number_text(gpu_memory_utilization)]
    if m.max_model_len is not None:
        args += ["--max-model-len", str(m.max_model_len)]
    if m.dtype != "auto":
        args += ["--dtype", m.dtype]
    if m.kv_cache_dtype != "auto":
        args += ["--kv-cache-dtype", m.kv_cache_dtype]
    if m.trust_remote_code:
        args.append("--trust-remote-code")
    if m.revision:
        args += ["--revision", m.revision]
    if max_num_seqs is not None:
        args += ["--max-num-seqs", str(max_num_seqs)]
    if max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(max_num_batched_tokens)]
    if enforce_eager:
        args.append("--enforce-eager")
    if enable_prefix_caching is True:
        args.append("--enable-prefix-caching")
    elif enable_prefix_caching is False:
        # vLLM <= 0.23 has the BooleanOptionalAction form; 0.33 only the --disable- alias.
        off = "--no-enable-prefix-caching"
        args.append(off if release.has_flag(off) else "--disable-prefix-caching")
    args += lora_args(spec)
    speculative = role_speculative(spec, role_path)
    if speculative is not None:
        path = f"{role_path}.speculative"
        args += speculative_args(speculative, release, tensor_parallel, path)
        for where, given in (
            ("engine.extraArgs", spec.engine.extra_args), (f"{role_path}.extraArgs", role_args),
        ):
            check_owned_flag(given, SPEC_FLAG, where, f"set by pdctl from {path}")
    check_offload_flags(spec, spec.engine.extra_args, "engine.extraArgs")
    check_offload_flags(spec, role_args, f"{role_path}.extraArgs")
    check_offload_env(spec)
    for flag, value in offload_args(spec, release, list(extra)):
        args.append(flag)
        if value != "":
            args.append(value)
    args += check_user_flags(spec.engine.extra_args, release, "engine.extraArgs")
    args += check_user_flags(role_args, release, f"{role_path}.extraArgs")
    return tuple(args)


SPEC_FLAG = "--speculative-config"


def role_speculative(spec: Spec, role_path: str) -> Speculative | None:
    """The speculative section of the role whose engines these are (serve, prefill, decode)."""
    section = {"serve": spec.serve, "prefill": spec.prefill, "decode": spec.decode}.get(role_path)
    return getattr(section, "speculative", None)


def speculative_config(s: Speculative) -> dict[str, Any]:
    """vLLM's SpeculativeConfig keys (vllm/config/speculative.py; the same names in 0.23.0
    l.80-143 and 0.33.0 l.413-506)."""
    cfg = {
        "method": s.method, "model": s.model, "num_speculative_tokens": s.num_speculative_tokens,
        "draft_tensor_parallel_size": s.draft_tensor_parallel,
        "prompt_lookup_min": s.prompt_lookup_min, "prompt_lookup_max": s.prompt_lookup_max,
    }
    return {key: value for key, value in cfg.items() if value is not None}  # unset: vLLM's


def speculative_args(
    s: Speculative, release: Release, tensor_parallel: int, path: str
) -> list[str]:
    """`--speculative-config '<json>'`, refused where vLLM would refuse it at start."""
    if not release.has_flag(SPEC_FLAG):
        raise SpecError(
            f"{SPEC_FLAG} is not a `vllm serve` flag in vLLM {release.version}", path=path,
            fix="pin an engine.version that has it (0.23.0 or 0.33.0)",
        )
    draft_tp = s.draft_tensor_parallel
    if draft_tp is not None and draft_tp not in (1, tensor_parallel):
        # SpeculativeConfig._verify_and_get_draft_tp (0.23.0 l.893-925, 0.33.0 l.1849-1870).
        raise SpecError(
            f"draftTensorParallel {draft_tp} is neither 1 nor the role's tensorParallel "
            f"{tensor_parallel}; vLLM accepts only those",
            path=f"{path}.draftTensorParallel",
            fix=f"set draftTensorParallel to 1 or {tensor_parallel}, or leave it out",
        )
    return [SPEC_FLAG, json.dumps(speculative_config(s), separators=(",", ":"))]


def flag_values(args: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Command-line flags as name -> value: `--flag value` and `--flag=value`, "" for a
    switch; positional words left out."""
    out: dict[str, str] = {}
    items = list(args)
    i = 0
    while i < len(items):
        a = items[i]
        if a.startswith("--"):
            name, eq, value = a.partition("=")
            if not eq and i + 1 < len(items) and not items[i + 1].startswith("--"):
                value, i = items[i + 1], i + 1
            out[name] = value
        i += 1
    return out


def check_owned_flag(args: tuple[str, ...], flag: str, path: str, why: str) -> None:
    for i, arg in enumerate(args):
        if arg.split("=", 1)[0].replace("_", "-") == flag:
            raise SpecError(f"{flag} is {why}", path=f"{path}[{i}]", fix=f"remove it from {path}")


def batch_limit(
    max_num_seqs: int | None, spec: Spec, role_args: tuple[str, ...] = ()
) -> int | None:
    """The engine's --max-num-seqs: the role's maxNumSeqs, else the first one the spec's
    extraArgs give (engine's, then the role's); None when neither sets it."""
    if max_num_seqs is not None:
        return max_num_seqs
    args = (*spec.engine.extra_args, *role_args)
    for i, arg in enumerate(args):
        flag, _, value = arg.partition("=")
        if flag == "--max-num-seqs" and not value and i + 1 < len(args):
            value = args[i + 1]
        if flag == "--max-num-seqs" and value.isdigit():
            return int(value)
    return None


# Flags pdctl sets itself (a second copy would win silently and break ports, placement or the
# router) or that would put a secret on a command line (visible in `ps` and rendered files).
MANAGED = {
    "--host": "pdctl binds engines to 0.0.0.0 itself",
    "--port": "set the port in the spec (serve.port, prefill.port, decode.port)",
    "--uds": "pdctl's health checks and router need the TCP port", "--model": "set model.name",
    "--served-model-name": "set model.servedName",
    "--tensor-parallel-size": "set tensorParallel (pdctl places GPUs from it)",
    "--pipeline-parallel-size": "set pipelineParallel (pdctl places GPUs from it)",
    "--api-key": "use secrets.apiKey (exported as VLLM_API_KEY from a 0600 file or a Secret)",
    "--hf-token": "use secrets.hfToken (exported as HF_TOKEN from a 0600 file or a Secret)",
    "--enable-lora": "set model.lora (docs/lora.md)",
    "--lora-modules": "list the adapters in model.lora.adapters",
    "--max-loras": "set model.lora.maxLoras", "--max-lora-rank": "set model.lora.maxLoraRank",
    "--max-cpu-loras": "set model.lora.maxCpuLoras",
}
SECRET_FLAGS = ("--api-key", "--hf-token")
SHORT = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size"}


def check_user_flags(args: tuple[str, ...], release: Release, path: str) -> list[str]:
    """User-given extra args: every `--flag` must exist in the pinned vLLM version, and none
    may be one pdctl manages (MANAGED)."""
    for i, arg in enumerate(args):
        name = arg.split("=", 1)[0]
        long = SHORT.get(name, name.replace("_", "-") if name.startswith("--") else name)
        if long in MANAGED:
            what = (
                "would put a secret on the command line (visible in `ps`)"
                if long in SECRET_FLAGS
                else "is set by pdctl"
            )
            raise SpecError(f"{name} {what}", path=f"{path}[{i}]", fix=MANAGED[long])
        if arg.startswith("--") and not release.has_flag(arg):
            name = arg.split("=", 1)[0]
            close = difflib.get_close_matches(name, sorted(release.flags), n=1, cutoff=0.75)
            fix = f"did you mean {close[0]!r}?" if close else "see `vllm serve --help`"
            raise SpecError(
                f"{name} is not a `vllm serve` flag in vLLM {release.version}", path=f"{path}[{i}]",
                fix=fix,
            )
    return list(args)
