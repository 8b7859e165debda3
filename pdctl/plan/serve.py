"""Plans for phases 0 and 1: identical engine instances (`serve`)."""

from __future__ import annotations

from pdctl.compat import Release
from pdctl.errors import SpecError
from pdctl.plan.args import engine_args
from pdctl.plan.model import Instance, Target
from pdctl.plan.place import Chooser, Group, place
from pdctl.spec.model import Serve, Spec


def serve_shape(spec: Spec, phase: int) -> Serve:
    if spec.serve is None:
        raise SpecError(
            f"phase {phase} needs a `serve` section (the engine shape)",
            path="serve",
            fix="add `serve: {replicas: 1, tensorParallel: 1}`",
        )
    return spec.serve


def check_cpu(spec: Spec, target: Target) -> None:
    """vLLM's CPU build is not what pdctl installs or pulls by default (pip `vllm` and the
    `vllm/vllm-openai` image are CUDA builds): say so at plan time, not at start."""
    docker = target == "kubernetes" or any(h.runtime == "docker" for h in spec.hosts)
    if docker and spec.engine.image is None:
        raise SpecError(
            "engine.device cpu needs a CPU image: the default vllm/vllm-openai is a CUDA build",
            path="engine.image",
            fix="set engine.image to a vLLM CPU image you built or pulled",
        )
    if target == "hosts":
        for i, host in enumerate(spec.hosts):
            if host.runtime == "conda":
                raise SpecError(
                    f"host {host.name}: engine.device cpu cannot use runtime conda, which "
                    "pip-installs the CUDA build of vLLM",
                    path=f"hosts[{i}].runtime",
                    fix="use runtime venv with `venv:` pointing at a prepared CPU build",
                )


def serve_instances(
    spec: Spec, release: Release, phase: int, target: Target, choose: Chooser
) -> tuple[Instance, ...]:
    shape = serve_shape(spec, phase)
    width = shape.tensor_parallel * shape.pipeline_parallel
    if spec.engine.device == "cpu":
        width = 0
        check_cpu(spec, target)

    def args(port: int) -> tuple[str, ...]:
        return engine_args(
            spec,
            release,
            port=port,
            tensor_parallel=shape.tensor_parallel,
            pipeline_parallel=shape.pipeline_parallel,
            gpu_memory_utilization=shape.gpu_memory_utilization,
            max_num_seqs=shape.max_num_seqs,
            max_num_batched_tokens=shape.max_num_batched_tokens,
            enforce_eager=shape.enforce_eager,
            enable_prefix_caching=shape.enable_prefix_caching,
            role_args=shape.extra_args,
            role_path="serve",
        )

    env = tuple(sorted(spec.engine.env.items()))
    if target == "kubernetes":
        return (
            Instance(
                name=f"{spec.name}-serve",
                role="serve",
                index=0,
                port=8000,
                args=args(8000),
                env=env,
                gpu_count=width,
                tensor_parallel=shape.tensor_parallel,
                replicas=shape.replicas,
            ),
        )
    group = Group("serve", shape.replicas, width, shape.port, "serve.replicas")
    out = []
    for slot in place(spec, [group], choose):
        inst_env = env
        if slot.gpus:
            inst_env = (("CUDA_VISIBLE_DEVICES", ",".join(map(str, slot.gpus))),) + env
        # Containers listen on 8000 inside; the host port maps onto it (`-p PORT:8000`).
        docker = slot.host.runtime == "docker"
        out.append(
            Instance(
                name=f"{spec.name}-serve-{slot.index}",
                role="serve",
                index=slot.index,
                port=slot.port,
                container_port=8000 if docker else None,
                args=args(8000 if docker else slot.port),
                env=inst_env,
                host=slot.host,
                gpus=slot.gpus,
                gpu_count=len(slot.gpus),
                tensor_parallel=shape.tensor_parallel,
            )
        )
    return tuple(out)
