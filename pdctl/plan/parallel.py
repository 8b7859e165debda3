"""Model-aware parallelism checks: what vLLM itself refuses at start, found at validate time.

Each rule is vLLM's own, read in the pinned versions' source (0.23.0 and 0.33.0, the flag lists
pdctl ships); the line numbers below are 0.33.0's (0.23.0's in brackets):
- tensor parallel divides the attention heads: vllm/config/model.py:1559
  `verify_with_parallel_config` raises "Total number of attention heads ... must be divisible
  by tensor parallel size" [1193];
- KV heads: the attention layers split them when TP <= KV heads (KV heads % TP == 0) and
  REPLICATE them when TP > KV heads, which needs TP % KV heads == 0:
  vllm/model_executor/models/llama.py:148-155, qwen3.py:91-98 [llama.py:147-154, qwen3.py:83-90];
- tensor parallel divides the MLP width: ColumnParallelLinear and RowParallelLinear
  (vllm/model_executor/layers/linear.py) split their output (gate/up) and input (down) sizes
  with `divide()`, which asserts the size divides evenly. The MoE experts' width
  (moe_intermediate_size) is split as `intermediate_size // tp_size` (fused_moe FusedMoEConfig),
  with no assert: an uneven split would load only part of each expert's weights (or trip a
  quantised kernel's block-alignment check), so it is refused too, unless expert parallel moves
  whole experts instead. The vocabulary is padded to a multiple of TP (VocabParallelEmbedding),
  so it never matters;
- block-quantised weights (fp8 `weight_block_size`, e.g. 128 x 128): every TP-split projection
  must split on a block boundary. vLLM 0.23.0 `validate_fp8_block_shape`
  (vllm/model_executor/layers/quantization/utils/fp8_utils.py:1123-1169): a column-parallel
  output (q/k/v, gate/up) per rank % block_n and a row-parallel input (o, down) per rank %
  block_k; the fused MoE experts (quantization/fp8.py:621-641 `Fp8MoEMethod.create_weights`):
  moe_intermediate_size / TP % block_n and % block_k ("The output_size of gate's and up's
  weight = 192 is not divisible by weight quantization block_n = 128", vllm#17569). Expert
  parallel keeps each expert whole (the MoE layer's TP is 1), so only the dense parts count;
- pipeline parallel at most the layers: vllm/distributed/utils.py:225 `get_pp_indices` gives
  each stage num_hidden_layers // pp_size layers, 0 past the layer count [138];
- expert parallel needs experts: vllm/config/model.py:1498 `_verify_with_expert_parallelism`.
  The experts need NOT divide evenly: vllm/model_executor/layers/fused_moe/
  expert_map_manager.py:67 `determine_expert_map` gives the first `experts % ep` ranks one more;
- prefill/decode TP under NIXL and Mooncake: the larger must be a multiple of the smaller
  (either side may be larger): vllm/distributed/kv_transfer/kv_connector/utils.py:522-539
  `tp_ratio` [516-533] (NIXL) and kv_connector/v1/mooncake/mooncake_connector.py:153-171
  `_get_tp_ratio` [88-104]. NIXL also refuses prefill TP > decode TP when the prefill's KV is
  replicated (prefill TP > KV heads) on a non-MLA model: kv_connector/v1/nixl/base_worker.py:
  2724-2730 [nixl/worker.py:1432-1437]. (llm-d's guides say decode TP >= prefill TP for NIXL and
  equal TP for Mooncake; the pinned source allows more.) p2p-nccl: equal TP (plan/shape.py).
Pure: the model's numbers come in as `Dims` (the CLI reads pdctl's table or `model.config`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pdctl.errors import SpecError
from pdctl.spec.model import Serve, Spec
from pdctl.spec.pd import Role

MAX_TP = 64  # the spec's own bound on tensorParallel


@dataclass(frozen=True)
class Dims:
    """The model numbers the checks need; `source`: where they came from (for messages)."""

    name: str
    heads: int
    kv_heads: int
    layers: int
    experts: int = 0
    mla: bool = False
    source: str = "pdctl's model table"
    intermediate: int = 0  # the dense MLP width (intermediate_size); 0: unknown
    moe_intermediate: int = 0  # one expert's MLP width (moe_intermediate_size); 0: none
    head_dim: int = 0  # 0: unknown (no attention block check)
    dense_mlp: bool = True  # some layer has a dense MLP of `intermediate` (not every MoE does)
    shared_intermediate: int = 0  # the shared experts' MLP width (a dense MLP in every MoE layer)
    block: tuple[int, int] | None = None  # (block_n, block_k) of block-quantised weights

    @classmethod
    def of(cls, model: Any, source: str = "pdctl's model table") -> Dims:
        """The numbers of a capacity ModelConfig (read by attribute: the plan layer does not
        import the capacity package)."""
        return cls(
            model.name, model.heads, model.kv_heads, model.layers, model.experts, model.is_mla,
            source, intermediate=model.intermediate, moe_intermediate=model.moe_intermediate,
            head_dim=model.head_dim, dense_mlp=model.dense_layers > 0,
            shared_intermediate=model.shared_intermediate, block=model.weight_block,
        )


def valid_tp(dims: Dims, limit: int = MAX_TP, expert_parallel: bool = False) -> list[int]:
    """Every tensor-parallel size vLLM accepts for the model's heads, KV heads and MLP widths
    (the experts' width only without expert parallel, which splits experts, not their width)."""
    out = []
    for tp in range(1, limit + 1):
        if dims.heads % tp:
            continue
        kv = 0 if dims.mla else dims.kv_heads  # MLA: one latent KV, no per-head split
        if kv and (kv % tp if tp <= kv else tp % kv):
            continue
        if _width_problem(dims, tp, expert_parallel) or _block_problem(dims, tp, expert_parallel):
            continue
        out.append(tp)
    return out


def _width_problem(dims: Dims, tp: int, expert_parallel: bool = False) -> str:
    """'' or which MLP width `tp` does not divide (vLLM's linear layers `divide()` it)."""
    if dims.intermediate and dims.intermediate % tp:
        return f"intermediate_size {dims.intermediate}"
    if dims.moe_intermediate and not expert_parallel and dims.moe_intermediate % tp:
        return f"moe_intermediate_size {dims.moe_intermediate}"
    return ""


def _block_problem(dims: Dims, tp: int, expert_parallel: bool = False) -> str:
    """'' or which projection of block-quantised weights `tp` splits off a block boundary."""
    if dims.block is None or tp == 1:
        return ""
    n, k = dims.block
    widths: list[tuple[str, int]] = []
    if dims.moe_intermediate and not expert_parallel:
        widths.append(("moe_intermediate_size", dims.moe_intermediate))
    if dims.intermediate and (dims.dense_mlp or not dims.moe_intermediate):
        widths.append(("intermediate_size", dims.intermediate))
    if dims.shared_intermediate:
        widths.append(("the shared experts' width", dims.shared_intermediate))
    if dims.head_dim and not dims.mla:
        widths.append(("the attention heads' width", dims.heads * dims.head_dim))
        kv = max(1, dims.kv_heads // tp) * dims.head_dim * tp  # replicated heads stay whole
        widths.append(("the KV heads' width", kv))
    for what, width in widths:
        if width % tp:
            continue  # _width_problem (or the head checks) say it
        part = width // tp
        if part % n or part % k:
            step = n if part % n else k
            return (
                f"{what} {width}, which tensorParallel {tp} splits into {part} per rank: not a "
                f"multiple of the {n}x{k} weight quantization block ({step})"
            )
    return ""


def nearest(value: int, options: list[int]) -> str:
    """'4' / '2 or 4': the closest options below and above `value`, powers of two first (the
    TPs GPUs come in); another option only where no power of two lies on that side."""
    twos = [o for o in options if o & (o - 1) == 0]
    below = [o for o in options if o < value]
    above = [o for o in options if o > value]
    below = [o for o in below if o in twos] or below
    above = [o for o in above if o in twos] or above
    picks = ([below[-1]] if below else []) + ([above[0]] if above else [])
    return " or ".join(map(str, picks))


def roles(spec: Spec, phase: int) -> list[tuple[str, Serve | Role]]:
    names = ("serve",) if phase in (0, 1) else ("prefill", "decode")
    return [(n, getattr(spec, n)) for n in names if getattr(spec, n, None) is not None]


def gpus_per_host(spec: Spec) -> int | None:
    """The most GPUs one host of the spec lists (None: no hosts section, e.g. Kubernetes,
    or a host that does not list its GPUs): no suggestion goes beyond it."""
    hosts = getattr(spec, "hosts", None) or ()
    counts = [len(getattr(h, "gpus", None) or ()) for h in hosts]
    return max(counts) if counts and all(counts) else None


def check_parallel(spec: Spec, phase: int, dims: Dims | None) -> None:
    """Every role's TP/PP/EP against the model, then prefill vs decode under the connector."""
    shapes = roles(spec, phase)
    if dims is not None:
        for section, role in shapes:
            _check_role(dims, section, role, gpus_per_host(spec))
    if phase in (2, 3) and len(shapes) == 2:
        _check_connector(spec, dims, shapes[0][1], shapes[1][1])


def _check_role(dims: Dims, section: str, role: object, most: int | None = None) -> None:
    tp = getattr(role, "tensor_parallel", 1)
    ep = bool(getattr(role, "expert_parallel", False))
    nodes = getattr(role, "nodes", 1) or 1  # a multi-node instance has `nodes` hosts' GPUs
    most = most * nodes if most is not None else None
    about = f"{dims.name} ({dims.source})"
    if tp not in valid_tp(dims, max(tp, MAX_TP), ep):
        width = _width_problem(dims, tp, ep)
        block = "" if width else _block_problem(dims, tp, ep)
        if dims.heads % tp:
            why = (
                f"{about} has {dims.heads} attention heads, which tensorParallel {tp} "
                "does not divide"
            )
        elif width:
            why = (
                f"{about} has {width}, which tensorParallel {tp} does not divide (vLLM's "
                "tensor-parallel linear layers split it evenly over the ranks)"
            )
        elif block:
            why = (
                f"{about} has block-quantised weights with {block}: vLLM refuses to load "
                'them ("is not divisible by weight quantization block_n")'
            )
        else:
            why = (
                f"{about} has {dims.kv_heads} KV heads: vLLM splits them over TP ranks "
                f"(TP must divide {dims.kv_heads}) or replicates them (TP a multiple of "
                f"{dims.kv_heads}), and {tp} is neither"
            )
        # The suggestion never goes past the GPUs of the instance's hosts (one host, or `nodes`
        # of them) where the spec lists them.
        valid = valid_tp(dims, expert_parallel=ep)
        options = [t for t in valid if most is None or t <= most] or [1]
        cut = nearest(tp, options) != nearest(tp, valid)
        gpus = f"{most} GPUs" + (f" on its {nodes} hosts" if nodes > 1 else " on a host")
        within = f" (the instance has at most {gpus})" if most is not None and cut else ""
        # Expert parallel keeps the experts whole: offered where it alone makes `tp` valid.
        by_ep = not ep and dims.experts and tp in valid_tp(dims, max(tp, MAX_TP), True)
        raise SpecError(
            why, path=f"{section}.tensorParallel",
            fix=f"use tensorParallel {nearest(tp, options)}{within} "
            f"(valid: {', '.join(map(str, valid))})"
            + (f", or keep {tp} with expertParallel: true (whole experts a GPU)" if by_ep else ""),
        )
    pp = getattr(role, "pipeline_parallel", 1)
    if pp > dims.layers:
        raise SpecError(
            f"pipelineParallel {pp} exceeds the {dims.layers} layers of {about}: vLLM gives "
            "each stage layers // stages layers, so stages would hold none",
            path=f"{section}.pipelineParallel", fix=f"use pipelineParallel {dims.layers} or fewer",
        )
    if getattr(role, "expert_parallel", False) and dims.experts == 0:
        raise SpecError(
            f"expertParallel needs a mixture-of-experts model; {about} has no experts "
            "(vLLM refuses --enable-expert-parallel for it)",
            path=f"{section}.expertParallel", fix="drop expertParallel, or serve a MoE model",
        )


def _check_connector(spec: Spec, dims: Dims | None, prefill: object, decode: object) -> None:
    dis = spec.disaggregation
    connector = dis.connector if dis is not None else "nixl"
    if connector not in ("nixl", "mooncake"):
        return  # p2p-nccl: equal TP, checked in plan/shape.py
    pre = getattr(prefill, "tensor_parallel", 1)
    dec = getattr(decode, "tensor_parallel", 1)
    if max(pre, dec) % min(pre, dec):
        options = sorted(
            {t for t in range(1, MAX_TP + 1) if max(t, pre) % min(t, pre) == 0}
            & set(valid_tp(dims) if dims is not None else range(1, MAX_TP + 1))
        )
        raise SpecError(
            f"{connector} needs prefill and decode tensorParallel of which one divides the "
            f"other (prefill {pre}, decode {dec}): vLLM's connector pairs the ranks by their "
            "ratio",
            path="decode.tensorParallel",
            fix=f"set decode.tensorParallel to {nearest(dec, options)} "
            f"(or prefill.tensorParallel {dec})",
        )
    if (
        connector == "nixl"
        and dims is not None
        and not dims.mla
        and dims.kv_heads
        and pre > dec
        and pre > dims.kv_heads
    ):
        raise SpecError(
            f"nixl cannot send from prefill TP {pre} to a smaller decode TP {dec} when the "
            f"prefill replicates KV heads ({dims.name} has {dims.kv_heads}, fewer than {pre})",
            path="prefill.tensorParallel",
            fix=f"set prefill.tensorParallel to at most {max(dec, dims.kv_heads)}, or "
            f"decode.tensorParallel to {pre}",
        )


def pin_notes(spec: Spec, phase: int) -> tuple[str, ...]:
    """On Kubernetes `<role>.hosts` is not used, as the `hosts` section it names is not (a
    spec with hosts renders for either target): a warning, so it is not silently dropped."""
    return tuple(
        f"{section}.hosts ({', '.join(role.hosts)}) pins bare-metal hosts and is not used on "
        "Kubernetes, where the scheduler places pods (kubernetes.nodeSelector chooses nodes)"
        for section, role in roles(spec, phase)
        if role.hosts
    )
