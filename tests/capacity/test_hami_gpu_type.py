"""decode.share's gpuTotalMib and gpuMemoryMib are checked against its gpuType: plan refuses
a contradiction with one located line, validate --strict with the same text."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import cli, written

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "phase3-hami.yaml"


def _variant(tmp_path: Path, *pairs: tuple[str, str]) -> str:
    text = EXAMPLE.read_text()
    for old, new in pairs:
        assert old in text
        text = text.replace(old, new)
    return str(written(tmp_path / "h.yaml", text))


@pytest.mark.parametrize(
    ("pairs", "said"),
    [
        ((("gpuType: H200", "gpuType: A100"),),
         "decode.share.gpuTotalMib: gpuTotalMib 143,771 MiB is not the memory of gpuType 'A100'"),
        ((("gpuTotalMib: 143771", "gpuTotalMib: 81559"),),
         "decode.share.gpuTotalMib: gpuTotalMib 81,559 MiB is not the memory of gpuType 'H200'"),
        ((("gpuMemoryPercent: 50", "gpuMemoryMib: 70000"), ("gpuTotalMib: 143771", "perGpu: 1"),
          ("    perGpu: 2\n", ""), ("gpuType: H200", "gpuType: L40S")),
         "decode.share.gpuMemoryMib: a 70,000 MiB slice is larger than gpuType 'L40S'"),
    ],
    ids=["a100-with-h200-total", "h200-with-h100-total", "slice-above-the-gpu"],
)
def test_a_share_that_contradicts_its_gpu_type_is_refused(
    tmp_path: Path, pairs: tuple[tuple[str, str], ...], said: str
) -> None:
    spec = _variant(tmp_path, *pairs)
    _, err = cli(["plan", spec], code=2)
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{spec}:" in err and said in err
    assert "; set gpuTotalMib to " in err or "; use at most " in err
    _, err = cli(["validate", "--strict", spec], code=1)
    assert said in err


def test_an_ambiguous_type_takes_the_size_gpu_total_mib_names(tmp_path: Path) -> None:
    spec = _variant(tmp_path, ("gpuType: H200", "gpuType: A100"),
                    ("gpuTotalMib: 143771", "gpuTotalMib: 81920"))
    out, _ = cli(["plan", spec])
    assert "GPU A100-80GB (81,920 MiB" in out.splitlines()[0]
    assert "comes in A100-40GB and A100-80GB" not in out
