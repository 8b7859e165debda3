"""How long one vLLM engine step takes: a model of the forward pass whose constants are
measured, per GPU and engine version, not per model (pdctl/data/speed/*.json).

A step runs `tokens` tokens: one for each decoding sequence plus the prefill chunks the
scheduler fitted into its token budget. Its time is the sum of

- a fixed cost per step (`fixed_s`) and per layer (`layer_s`): scheduling, sampling, kernel
  launches, what CUDA graphs do not hide;
- the linear layers: the weights a step reads over the bandwidth, or their FLOPs
  (2 x active parameters x tokens) over the compute, whichever binds, joined smoothly
  ((a^k + b^k)^(1/k), k = `overlap_k`: a GEMM near the ridge is slower than either bound);
  for MoE models only the experts the step's tokens route to are read
  (pdctl.capacity.roofline.weights_read_per_step);
- attention: the KV the decoding sequences read (their context x the KV bytes of a token)
  over the bandwidth, and the prefill chunks' attention FLOPs (each chunk token against its
  context, causal) over the compute. MLA models read their compressed latent and, decoding,
  compute against it (2 x heads x (latent + latent - rope) per context token; vLLM's absorbed
  MLA decode, vllm/v1/attention/backends/mla/common.py);
- a cost per token (`token_s`: sampling, detokenising and streaming each new token, the
  embedding and lm_head rows);
- without CUDA graphs (`--enforce-eager`), a launch cost per layer and step
  (`eager_layer_s`): every kernel is launched from Python one by one. It is bound by the
  host's CPU, not the GPU: fitted on one machine's sweep, it is the least portable constant.

Every efficiency is a share of the GPU's datasheet peak (pdctl.capacity.gpus), so a GPU without
a calibration of its own takes the nearest one's shares against its own peaks (`Calibration
.extrapolated_from` says so). Before the engine sees a request, vLLM's API server takes
`request_s` + `prompt_token_s` x its prompt tokens (HTTP, the tokenizer), one request after
another and between the `output_token_s` it spends on every token it streams back: a burst of
long prompts, or many streams at once, makes new requests wait there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from typing import Any

from pdctl.capacity.fit import Shape
from pdctl.capacity.gpus import GpuType
from pdctl.capacity.memory import kv_bytes_per_token
from pdctl.capacity.models import ModelConfig
from pdctl.capacity.roofline import TIME_SLICE_EFFICIENCY, weights_read_per_step

CONSTANTS = (
    "fixed_s",
    "layer_s",
    "token_s",
    "request_s",
    "prompt_token_s",
    "output_token_s",
    "output_step_s",
    "weights_bw",
    "kv_bw",
    "linear_flops",
    "attn_flops",
    "overlap_k",
)


@dataclass(frozen=True)
class Calibration:
    """The fitted constants of one GPU and engine version, and where they came from."""

    gpu: str
    engine: str
    fixed_s: float
    layer_s: float
    token_s: float
    request_s: float  # the API server's time for one request before the engine sees it
    prompt_token_s: float  # ... and for each of its prompt tokens (tokenizing)
    output_token_s: float  # ... and for each token it streams back (detokenizing, SSE)
    weights_bw: float  # share of the datasheet bandwidth the weight reads reach
    kv_bw: float  # share of the bandwidth decode attention's KV reads reach
    linear_flops: float  # share of the dense BF16 peak the linear layers reach
    attn_flops: float  # share of the peak prefill attention reaches
    overlap_k: float = 4.0
    # the API server's time for each step's outputs, whatever their number (one message from
    # the engine core, one pass of its output handler); 0 in calibrations made before it
    output_step_s: float = 0.0
    eager_layer_s: float = 0.0  # per layer and step without CUDA graphs (not fit_speed's)
    provenance: dict = field(default_factory=dict, compare=False, hash=False)
    extrapolated_from: str | None = None  # "H200": this GPU had no calibration of its own

    @property
    def fitted(self) -> bool:
        """The constants were fitted to measured cells (else they are first estimates)."""
        return bool(self.provenance.get("cells_fitted"))

    @property
    def basis(self) -> str:
        """What a speed figure rests on, in words."""
        how = "calibrated on" if self.fitted else "estimated (not yet fitted to measurements) for"
        if self.extrapolated_from:
            return (
                f"extrapolated from {self.extrapolated_from} (vLLM {self.engine}; "
                f"{'fitted' if self.fitted else 'not yet fitted'}), scaled by bandwidth and "
                "FLOP/s"
            )
        return f"{how} {self.gpu} (vLLM {self.engine})"


@lru_cache(maxsize=1)
def calibrations() -> tuple[Calibration, ...]:
    """Every calibration shipped in pdctl/data/speed/."""
    found = []
    folder = resources.files("pdctl").joinpath("data").joinpath("speed")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".json"):
            continue
        doc = json.loads(entry.read_text())
        values: dict[str, Any] = {
            k: float(doc["constants"][k]) for k in CONSTANTS if k in doc["constants"]}
        found.append(
            Calibration(
                gpu=doc["gpu"], engine=doc["engine"], provenance=doc.get("provenance", {}),
                eager_layer_s=float(doc.get("eager", {}).get("eager_layer_s", 0.0)), **values,
            )
        )
    return tuple(found)


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")[:3] if x.isdigit())


def calibration_for(gpu: GpuType, engine: str) -> Calibration:
    """The calibration of `gpu` for `engine`; else the nearest engine version of the same GPU;
    else the calibrated GPU closest in bandwidth and FLOP/s, marked as extrapolated."""
    from pdctl.capacity.gpus import GPUS

    cals = calibrations()
    want = _version_key(engine)

    def by_version(c: Calibration) -> tuple[int, ...]:
        return tuple(abs(a - b) for a, b in zip(_version_key(c.engine), want, strict=False))

    same = [c for c in cals if c.gpu == gpu.name]
    if same:
        return min(same, key=by_version)

    def distance(c: Calibration) -> float:
        other = GPUS.get(c.gpu)
        if other is None:
            return float("inf")
        import math

        return abs(math.log(other.bandwidth_gbs / gpu.bandwidth_gbs)) + abs(
            math.log(other.bf16_tflops / gpu.bf16_tflops)
        )

    best = min(cals, key=lambda c: (distance(c), by_version(c)))
    from dataclasses import replace

    return replace(best, gpu=gpu.name, extrapolated_from=best.gpu)


@dataclass(frozen=True)
class Engine:
    """What the step model needs of one instance, computed once: bytes and FLOPs per token."""

    model: ModelConfig
    gpu: GpuType
    shape: Shape
    cal: Calibration
    kv_bytes: float  # KV bytes of one token of context, per GPU
    per_gpu: int = 1  # instances time-slicing one GPU (HAMi slices)

    @property
    def split(self) -> int:
        return max(1, self.shape.tp * self.shape.pp)

    def attn_pair_flops(self, decoding: bool) -> float:
        """FLOPs of one query token against one context token, all layers, per GPU."""
        m = self.model
        if m.mla_latent is not None and decoding:
            rope = 64  # qk_rope_head_dim of every DeepSeek MLA config
            per_head = 2 * m.mla_latent + 2 * (m.mla_latent - rope)
        else:
            per_head = 4 * m.head_dim
        return m.layers * m.heads * per_head / self.split

    def linear_flops(self, tokens: int, sampled: int) -> float:
        """FLOPs of the linear layers for `tokens` tokens, per GPU: 2 x the active parameters
        but the lm_head for every token (`active_params` already leaves out the input
        embedding, a row lookup), and the lm_head only for the `sampled` positions (vLLM
        computes logits for each scheduled request's last token only:
        vllm/v1/worker/gpu_model_runner.py, logits_indices)."""
        m = self.model
        head = m.vocab * m.hidden
        body = max(m.active_params - head, 0.0)
        return 2 * (body * tokens + head * sampled) / self.split

    def window_share(self, context: float) -> float:
        """The context a sliding-window model's layers read, as a share of `context`."""
        m = self.model
        if not m.sliding_window or not m.sliding_layers or context <= m.sliding_window:
            return 1.0
        slide = m.sliding_layers / m.layers
        return (1 - slide) + slide * m.sliding_window / context

    def step_s(
        self, decodes: int, decode_context: float, chunks: tuple[tuple[int, int], ...] = ()
    ) -> float:
        """One step: `decodes` sequences decoding with `decode_context` tokens of context in
        all, and prefill `chunks` of (tokens, context before the chunk)."""
        c, g = self.cal, self.gpu
        tokens = decodes + sum(n for n, _ in chunks)
        if tokens <= 0:
            return 0.0
        bw = g.bandwidth_gbs * 1e9
        peak = g.bf16_tflops * 1e12
        weights = weights_read_per_step(self.model, self.shape, tokens)
        t_read = weights / (bw * c.weights_bw)
        t_math = self.linear_flops(tokens, decodes + len(chunks)) / (peak * c.linear_flops)
        k = c.overlap_k
        linear = (t_read**k + t_math**k) ** (1 / k)
        ctx = decode_context
        if decodes:
            ctx *= self.window_share(decode_context / decodes)
        # decode attention: the KV read, or (MLA's absorbed decode) its FLOPs where they bind
        kv = max(
            ctx * self.kv_bytes / (bw * c.kv_bw),
            ctx * self.attn_pair_flops(True) / (peak * c.attn_flops),
        )
        attn = 0.0
        for n, before in chunks:  # causal: each chunk token against its context
            pairs = n * (before * self.window_share(before + n) + n / 2)
            attn += pairs * self.attn_pair_flops(False) / (peak * c.attn_flops)
        layer_s = c.layer_s + (c.eager_layer_s if self.shape.enforce_eager else 0.0)
        t = c.fixed_s + layer_s * self.model.layers + linear + kv + attn + c.token_s * tokens
        if self.per_gpu > 1:
            t *= self.per_gpu / TIME_SLICE_EFFICIENCY
        return t


def engine_for(
    model: ModelConfig, gpu: GpuType, shape: Shape, per_gpu: int = 1, cal: Calibration | None = None
) -> Engine:
    cal = cal or calibration_for(gpu, shape.engine)
    kv = kv_bytes_per_token(model, shape.tp, shape.pp, shape.kv_cache_dtype, shape.dtype)
    return Engine(model, gpu, shape, cal, float(kv), max(1, per_gpu))
