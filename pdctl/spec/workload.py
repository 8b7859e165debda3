"""Spec sections for capacity planning (`pdctl plan`): the GPU type and the expected traffic.

Both are optional: `pdctl plan` also takes them as command-line options.
"""

from pydantic import Field

from pdctl.spec.base import Section


class Hardware(Section):
    """The GPUs the deployment runs on, for capacity planning."""

    gpu: str | None = Field(
        None,
        description="GPU type, e.g. `H100`, `H200`, `A100-80GB`, `L40S`, `L4`, `A10G`, "
        "`RTX-4090` (`pdctl plan --help` lists them).",
    )
    gpu_memory_gib: float | None = Field(
        None, gt=0, le=4096, examples=[80],
        description="GPU memory in GiB, for a GPU not in pdctl's table."
    )


class Workload(Section):
    """Expected traffic, for capacity planning (P:D ratio, batch, packing advice)."""

    prompt_tokens: int = Field(1024, ge=1, le=10_000_000, description="Mean prompt length.")
    output_tokens: int = Field(256, ge=1, le=10_000_000, description="Mean output length.")
    requests_per_second: float | None = Field(
        None, gt=0, examples=[10], description="Mean request rate over the whole deployment."
    )
    ttft_ms: float | None = Field(
        None, gt=0, examples=[500],
        description="Target time to first token (ms), for the prefill side."
    )
    tpot_ms: float | None = Field(
        None, gt=0, examples=[50],
        description="Target time per output token (ms): caps the decode batch."
    )
