"""The plan's inputs, gathered once for every command: the spec (with its overlays), the
model's config and dimensions, a preflight recording (`--facts`) -> a Plan, and its Bundle.

Below the CLI (which reads SPEC and its overlays, stdin included, and hands the texts here)
and above the layers it joins: spec, plan, capacity (the model table), probe (reading a
recording), render. Every failure is a located SpecError or a UsageError.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pdctl.errors import SpecError, UsageError
from pdctl.spec.source import too_big

if TYPE_CHECKING:  # the plan and the models load when a spec is read, not at start-up
    from pdctl.plan import Plan
    from pdctl.plan.parallel import Dims
    from pdctl.preflight.facts import Facts
    from pdctl.render.bundle import Bundle
    from pdctl.spec import Spec
    from pdctl.spec.source import Source

MAX_CONFIG_BYTES = 2 * 1024 * 1024  # a model's config.json is a few KiB


def read_spec(texts: list[tuple[str, str]]) -> tuple[Spec, Source]:
    """The spec of (text, file name) pairs: SPEC, then its overlays deep-merged in order.
    Validated with pydantic's plugins off: looking for plugins reads every installed
    package's entry points (20-45 ms of a cold render; docs/performance.md). Checks
    model.maxModelLen against the model's config, as every command does."""
    from pdctl.spec.load import load_data, plugins_off
    from pdctl.spec.overlay import merge
    from pdctl.spec.source import parse

    with plugins_off():
        for text, name in texts[1:]:
            _not_empty_overlay(text, name)
        data, source = merge(*(parse(text, name) for text, name in texts))
        spec = load_data(data, source)
    if spec.model.max_model_len is not None:
        from pdctl.plan.context import check_max_model_len

        try:
            check_max_model_len(spec, *known_model_config(spec, source.file))
        except SpecError as exc:
            raise source.locate(exc) from None
    for role in ("serve", "prefill", "decode"):  # speculative.config: a draft's config.json
        s = getattr(getattr(spec, role, None), "speculative", None)
        if s is not None and s.config:
            try:
                s._draft = _model_config(s.config, source.file, f"{role}.speculative.config")
            except SpecError as exc:
                raise source.locate(exc) from None
    return spec, source


def _not_empty_overlay(text: str, name: str) -> None:
    """An overlay with no keys (empty, or comments only) changes nothing: refused, naming the
    overlay, as it is most likely the wrong file (docs/spec.md, "Overlays")."""
    content = [
        line
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#") and line.strip() not in ("---", "...")
    ]
    if not content:
        raise SpecError(
            "this overlay is empty: it holds no keys to change", file=name, line=1,
            fix="write the keys it changes, e.g. `kubernetes: {namespace: prod}`, or drop this "
            "--overlay",
        )


def read_facts(root: Path, spec: Spec) -> Facts:
    """A preflight recording (`pdctl preflight --record DIR`, every command's `--facts DIR`)
    of the spec's hosts. A recording of other machines must not silently pick GPUs or size
    memory: one usage error (exit 2) when no host of the spec has a folder in it, or when a
    host's recording lacks GPUs the spec lists for it (another machine, or a stale one)."""
    from pdctl.preflight.record import read
    from pdctl.preflight.registry import facts_from

    facts = facts_from(read(root, tuple(h.name for h in spec.hosts)))
    names = [h.name for h in spec.hosts]
    recorded = [h.name for h in facts.hosts]
    fix = f"record these hosts with `pdctl preflight SPEC --record {root}`"
    if names and recorded and not set(names) & set(recorded):
        raise UsageError(
            f"--facts {root}: no folder for a host of the spec (it has {', '.join(recorded)}; "
            f"the spec's hosts are {', '.join(names)})",
            fix=fix + ", or name each host's folder after its hosts[].name",
        )
    for host in spec.hosts:
        hf = facts.host(host.name)
        if hf is None or not hf.gpus or not host.gpus:
            continue
        missing = sorted(set(host.gpus) - {g.index for g in hf.gpus})
        if missing:
            have = ",".join(str(g.index) for g in hf.gpus)
            raise UsageError(
                f"--facts {root}: host {host.name}'s recording has GPUs {have}, but the spec "
                f"lists {','.join(map(str, missing))} too (a recording of another machine, or a "
                "stale one)",
                fix=fix,
            )
    return facts


def plan_spec(
    spec: Spec,
    source: Source,
    phase: int | None = None,
    target: str | None = None,
    facts: Facts | None = None,
    **kwargs: Any,
) -> Plan:
    """Plan a spec read by read_spec; `facts` (read_facts) picks each instance's GPUs by
    topology. Errors located in the spec."""
    from pdctl.plan import make_plan

    if facts is not None:
        from pdctl.plan.topology import chooser

        kwargs["choose"] = chooser(facts)
    try:
        if "dims" not in kwargs:
            kwargs["dims"] = model_dims(spec, source.file, phase)
        return make_plan(spec, phase=phase, target=target, **kwargs)
    except SpecError as exc:
        raise source.locate(exc) from None


def render_plan(plan: Plan, source: Source) -> Bundle:
    """The plan's bundle; a render error located in the spec."""
    from pdctl.render import render

    try:
        return render(plan)
    except SpecError as exc:
        raise source.locate(exc) from None


def read_bounded(path: Path, limit: int, name: str) -> str:
    """A UTF-8 file of at most `limit` bytes (a spec, a model config). Reads at most limit + 1
    bytes, so `/dev/zero` or a huge file is refused without being read."""
    try:
        with path.open("rb") as stream:
            data = stream.read(limit + 1)
    except OSError as exc:
        raise SpecError(f"cannot read: {exc.strerror or exc}", file=name) from None
    return text_of(data, limit, name)


def read_report(path: str) -> dict[str, Any]:
    """A report `pdctl bench` saved (`bench --compare`, `tune --from`)."""
    from pdctl.bench.report import check_report

    try:
        doc = json.loads(read_bounded(Path(path), 64 << 20, path))
    except ValueError as exc:
        raise UsageError(
            f"{path}: not JSON ({exc})", fix="pass a file `pdctl bench` saved"
        ) from None
    return check_report(doc, path)


def text_of(data: bytes | str, limit: int, name: str) -> str:
    if len(data) > limit:
        raise too_big(name, limit)
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError("is not UTF-8 text", file=name) from None


def read_model_config(ref: str, spec_file: str, source: Source | None = None) -> dict[str, Any]:
    """`model.config`: a model's config.json, relative to the spec file (or, for a spec read
    from stdin, the working folder), at most MAX_CONFIG_BYTES. One SpecError when unusable,
    located in the spec when its source is given."""
    try:
        return _model_config(ref, spec_file)
    except SpecError as exc:
        raise (source.locate(exc) if source is not None else exc) from None


def _model_config(ref: str, spec_file: str, path: str = "model.config") -> dict[str, Any]:
    base = Path.cwd() if spec_file in ("-", "<stdin>") else Path(spec_file).resolve().parent
    file = Path(ref).expanduser()
    file = file if file.is_absolute() else base / file
    fix = "give the path of the model's config.json"
    if not file.is_file():
        what = "no such file" if not file.exists() else "not a regular file"
        raise SpecError(f"{what}: {file}", path=path, fix=fix)
    try:
        data = json.loads(read_bounded(file, MAX_CONFIG_BYTES, str(file)))
    except SpecError as exc:
        raise SpecError(f"{file}: {exc.message}", path=path, fix=exc.fix) from None
    except RecursionError:
        raise SpecError(f"{file} is nested too deeply", path=path, fix=fix) from None
    except ValueError as exc:  # JSONDecodeError; an int past 4,300 digits
        what = str(exc) if isinstance(exc, json.JSONDecodeError) else "a number is too long"
        raise SpecError(f"cannot read {file} as JSON: {what}", path=path) from None
    if not isinstance(data, dict):
        raise SpecError(f"{file} is not a JSON object", path=path, fix=fix)
    return data


def known_model_config(spec: Spec, spec_file: str) -> tuple[dict[str, Any] | None, str]:
    """(the model's config.json values, where they came from): `model.config` when it reads,
    else pdctl's model table; None when neither knows the model."""
    from pdctl.capacity.models import builtin_config

    if spec.model.config:
        try:
            return _model_config(spec.model.config, spec_file), "model.config"
        except SpecError:
            pass  # `pdctl plan` reports an unreadable config; fall back to the table
    return builtin_config(spec.model.name), "pdctl's model table"


def model_dims(spec: Spec, spec_file: str, phase: int | None = None) -> Dims | None:
    """The model's heads, KV heads, layers and experts for the parallelism checks
    (plan/parallel.py): from `model.config` when it reads, else pdctl's model table; None when
    neither knows the model, or when every role runs on one GPU (nothing to check, and the
    capacity package stays unimported)."""
    from pdctl.plan.parallel import Dims, roles

    shapes = [r for _, r in roles(spec, spec.phase if phase is None else phase)]
    if all(
        getattr(r, "tensor_parallel", 1) == 1
        and getattr(r, "pipeline_parallel", 1) == 1
        and not getattr(r, "expert_parallel", False)
        for r in shapes
    ):
        return None
    from pdctl.capacity.params import parse_config

    raw, where = known_model_config(spec, spec_file)
    if raw is None:
        return None
    try:
        m = parse_config(spec.model.name, raw, None, from_table=where != "model.config")
    except SpecError:
        return None
    return Dims.of(m, where)


def capacity_warnings(spec: Any, spec_file: str) -> list[str]:
    """Lines `file: warning: role: does not fit ...` for each role of SPEC that does not fit
    on the spec's own GPU (hardware.gpu / gpuMemoryGib / decode.share.gpuType). Nothing when
    the spec names no GPU or pdctl does not know the model (validate must not fail on that).
    `validate` prints these; `render` should too (and refuse them under --strict).
    First, when pdctl knows nothing of the model: that nothing model-specific was checked."""
    unknown = unknown_model_warning(spec, spec_file)
    if unknown:
        return [unknown]  # no shapes: no fit to check either
    hardware = getattr(spec, "hardware", None)
    share = getattr(spec.decode, "share", None) if spec.decode is not None else None
    named = hardware is not None and (hardware.gpu or hardware.gpu_memory_gib)
    if not (named or (share is not None and share.gpu_type)):
        return []  # no GPU named: nothing to check against (and nothing to import)
    from pdctl.capacity import ASSUMED, spec_gpu

    try:
        device, origin = spec_gpu(spec)
    except SpecError as exc:  # a GPU pdctl does not know, and no memory: no fit was checked
        return [f"{spec_file}: warning: {exc}"]  # spec_gpu names the field, not the file
    if origin == ASSUMED:
        return []
    try:
        from pdctl.capacity.verdict import does_not_fit

        config = read_model_config(spec.model.config, spec_file) if spec.model.config else None
        lines = does_not_fit(spec, config, device)
    except SpecError:
        return []
    if lines:  # which GPU it did not fit, where the name left the memory open
        lines = gpu_name_note(spec, None) + lines
    return [f"{spec_file}: warning: {line}" for line in lines]


def gpu_name_note(spec: Any, option: str | None) -> tuple[str, ...]:
    """A warning when the GPU's name leaves its memory open ('A100': 40 or 80 GB)."""
    from pdctl.capacity.gpus import ambiguous

    hardware = getattr(spec, "hardware", None)
    share = getattr(spec.decode, "share", None) if spec.decode is not None else None
    name = option or (hardware.gpu if hardware is not None else None)
    name = name or (share.gpu_type if share is not None else None)
    if hardware is not None and hardware.gpu_memory_gib and not option:
        return ()  # the memory is given
    from_share = not option and not (hardware is not None and hardware.gpu)
    if from_share and share is not None and share.gpu_total_mib is not None:
        return ()  # gpuTotalMib picked the size (capacity.spec_gpu checks it is one of them)
    note = ambiguous(name) if name else ""
    return (note,) if note else ()


def unknown_model_warning(spec: Any, spec_file: str) -> str:
    """'' or a warning line when neither `model.config` nor pdctl's table knows the model: no
    TP/PP rule against its heads and widths, no fit, no quantisation block was checked (a
    misspelt name would otherwise pass with any TP). Names the nearest known models."""
    raw, _ = known_model_config(spec, spec_file)
    if raw is not None:
        return ""
    from pdctl.capacity.params import nearest_names

    name = spec.model.name
    near = nearest_names(name)
    only = " (model.paramsBillion sizes the weights only)" if spec.model.params_billion else ""
    return (
        f"{spec_file}: warning: model.name: pdctl does not know {name!r}{only}: nothing "
        "model-specific was checked (tensor/pipeline parallel against its heads, widths and "
        "quantisation blocks; whether it fits the GPU)"
        + (f"; did you mean {' or '.join(near)}?" if near else "")
        + " Set model.config to its config.json to check it (--strict refuses this)"
    )


def capacity_plan(
    spec: Spec, source: Source, spec_file: str, gpu: str | None = None,
    gpu_memory_gib: float | None = None, prompt: int | None = None, output: int | None = None,
    rate: float | None = None, ttft: float | None = None, tpot: float | None = None,
    facts: Path | None = None,
) -> tuple[Any, str]:
    """`pdctl plan`'s figures for a loaded spec (`spec_file`: where its model.config is
    relative to), with the command line's overrides; `facts`: a preflight recording whose
    most used GPU says what other processes hold. Errors are located in `source`."""
    from pdctl.capacity import (
        ASSUMED,
        adapt_traffic,
        lora_shape,
        spec_gpu,
        spec_model_config,
        spec_shape,
        spec_traffic,
    )
    from pdctl.capacity.gpus import gpu_notes
    from pdctl.capacity.report import plan_capacity

    try:
        from pdctl.plan.parallel import check_parallel

        config = read_model_config(spec.model.config, spec_file) if spec.model.config else None
        model = spec_model_config(spec.model, config)
        # The same parallelism rules as validate/render: TP dividing the heads and the MLP
        # widths (which model_dims may not know: the plan's model does), PP <= layers.
        dims = model_dims(spec, spec_file)
        if dims is not None and model.shapes_from is None:  # not a borrowed shape
            dims = replace(
                dims, intermediate=model.intermediate, moe_intermediate=model.moe_intermediate
            )
        check_parallel(spec, spec.phase, dims)
        device, origin = spec_gpu(spec, gpu, gpu_memory_gib)
        roles = spec.roles
        lora = lora_shape(spec.model, model)
        shapes = {role: replace(spec_shape(spec, role), lora=lora) for role in roles}
        traffic = spec_traffic(spec, prompt, output, rate, ttft, tpot)
        traffic, adapted = adapt_traffic(traffic, spec, model, shapes, prompt, output)
        _within_model_len(traffic, model, shapes, prompt is not None or output is not None)
        used = used_bytes(read_facts(facts, spec)) if facts is not None else 0
        result = plan_capacity(spec, model, device, traffic, shapes, used)
        notes = adapted + gpu_notes(device, origin == ASSUMED) + gpu_name_note(spec, gpu)
        return replace(result, warnings=result.warnings + notes), origin
    except UsageError:
        raise
    except SpecError as exc:
        raise source.locate(exc) from None


def _within_model_len(traffic: Any, model: Any, shapes: dict[str, Any], flags: bool) -> None:
    """A request of prompt + output tokens must fit maxModelLen: vLLM's OpenAI server rejects
    longer ones ("This model's maximum context length is ..."), so a plan for them is moot."""
    length = min(shape.model_len(model) for shape in shapes.values())
    if traffic.context <= length:
        return
    what = (
        f"a request of {traffic.prompt_tokens:,} prompt + {traffic.output_tokens:,} output "
        f"tokens ({traffic.context:,}) is longer than maxModelLen {length:,}: vLLM rejects it"
    )
    most = max(1, length - traffic.output_tokens)
    if flags:
        raise UsageError(
            what,
            fix=f"use --prompt-tokens {most} or fewer (with --output-tokens "
            f"{traffic.output_tokens}), or raise model.maxModelLen",
        )
    raise SpecError(
        what, path="workload.promptTokens",
        fix=f"set workload.promptTokens to {most} or fewer, or raise model.maxModelLen",
    )


def used_bytes(facts: Any) -> int:
    """The most memory any GPU of a preflight recording had in use before vLLM started."""
    used = [g.memory_used_mib for h in facts.hosts for g in h.gpus or ()]
    return max(used, default=0) * 1024 * 1024
