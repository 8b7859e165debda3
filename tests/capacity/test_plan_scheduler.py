"""vLLM refuses max_num_batched_tokens < max_num_seqs (SchedulerConfig): with the values the
plan fills in from vLLM's defaults, that is a does-not-start verdict."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import cli, written

SPEC = """\
name: t
phase: 2
model: {{name: Qwen/Qwen3-8B, maxModelLen: 8192}}
hardware: {{gpu: H100-SXM}}
engine: {{version: '0.23.0'}}
hosts:
  - {{name: a, address: 192.0.2.1, gpus: [0, 1]}}
prefill: {{replicas: 1}}
decode: {{replicas: 1, {decode}}}
disaggregation: {{connector: nixl}}
"""


def _refused(tmp_path: Path, decode: str) -> tuple[str, str]:
    """(the spec's path, `plan`'s output flattened) for a decode section that plan refuses."""
    spec = str(written(tmp_path / "s.yaml", SPEC.format(decode=decode)))
    out, _ = cli(["plan", spec], code=1)
    return spec, " ".join(out.split())


def test_more_seqs_than_the_default_batched_tokens_does_not_start(tmp_path: Path) -> None:
    spec, flat = _refused(tmp_path, "maxNumSeqs: 9000")
    assert "decode: vLLM would refuse to start it: max_num_batched_tokens (8,192) (vLLM's " \
           "default here) must be greater than or equal to max_num_seqs (9,000)" in flat
    assert "set decode.maxNumBatchedTokens to 9000 or more, or decode.maxNumSeqs to 8192" in flat
    assert "decode does not start" in flat
    _, err = cli(["validate", "--strict", spec], code=1)
    assert "max_num_batched_tokens (8,192)" in err


def test_fewer_batched_tokens_than_the_default_seqs_does_not_start(tmp_path: Path) -> None:
    _, flat = _refused(tmp_path, "maxNumBatchedTokens: 512")
    assert "max_num_batched_tokens (512) must be greater than or equal to max_num_seqs " \
           "(1,024) (vLLM's default here)" in flat


def test_defaults_that_agree_still_plan(tmp_path: Path) -> None:
    cli(["plan", str(written(tmp_path / "s.yaml", SPEC.format(decode="maxNumSeqs: 256")))])
