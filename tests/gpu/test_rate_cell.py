"""The open-loop (Poisson) cells of the GPU harness (tests/gpu/speed.py run_rate_cell), against
a small streaming server on loopback that answers like vLLM's /v1/completions: requests go
out at their arrival times whatever the earlier ones are doing, and the cell records them as
the speed model reads them (pdctl.capacity.speedcells.cells_of)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pdctl.capacity.params import model_config
from pdctl.capacity.speedcells import cells_of
from tests.gpu import speed as sp

TOKEN_S = 0.01  # the server streams one token every 10 ms


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for _ in range(body["max_tokens"]):
            time.sleep(TOKEN_S)
            self.wfile.write(b'data: {"choices": [{"text": "t"}]}\n\n')
            self.wfile.flush()
        usage = {"completion_tokens": body["max_tokens"]}
        self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture()
def server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()


def test_arrivals_are_poisson_and_the_same_for_a_seed() -> None:
    times = sp.arrivals(5.0, 200.0, seed=7)
    assert times == sp.arrivals(5.0, 200.0, seed=7) != sp.arrivals(5.0, 200.0, seed=8)
    assert times == sorted(times) and times[-1] <= 200.0
    assert 900 < len(times) < 1100  # 5/s over 200 s


def test_an_open_loop_cell_sends_at_its_times_and_reads_back_as_a_rate_load(server) -> None:
    # 10 tokens of 10 ms each: a request lasts ~0.1 s; at 20/s several overlap, which a
    # closed loop of one would never do
    cell = sp.run_rate_cell("127.0.0.1", server, "m", 1000, 8, 10, rate=20.0, seed=3,
                            submit_s=1.0)
    want = sp.arrivals(20.0, 1.0, seed=3)
    assert cell["rate"] == 20.0 and cell["concurrency"] is None
    assert cell["requests"] == cell["completed"] == len(want) and not cell["errors"]
    sent = sorted(r[0] for r in cell["raw"])
    assert all(abs(s - w) < 0.05 for s, w in zip(sent, want, strict=True)), (sent, want)
    assert all(n == 10 for *_, n in cell["raw"])
    assert 8 <= cell["tpot_ms"]["p50"] <= 30
    spans = sorted((s, s + e2e / 1000) for s, _, e2e, _ in cell["raw"])
    assert any(b[0] < a[1] for a, b in zip(spans, spans[1:], strict=False))  # overlapping
    doc = {"spec": {"hardware": {"gpu": "H100-SXM"}, "engine": {"version": "0.23.0"},
                    "model": {"maxModelLen": 4096}},
           "cells": {sp.rate_key("qwen3-8b", "decode", 20.0): cell}}
    cfg = json.loads((sp.Path(__file__).parent / "models/qwen3-8b/config.json").read_text())
    (read,) = cells_of(doc, model_config("qwen3-8b", cfg))
    assert read.load.rate == 20.0 and read.load.concurrency is None
    assert read.load.requests == len(want) and read.key == "qwen3-8b/decode/r20"
    assert read.load.arrivals == tuple(sent)  # replayed as sent, not drawn again
    assert sp.rate_key("qwen3-8b", "decode", 20.0, 2) == "qwen3-8b/decode/r20#2"


def _committed() -> list:
    from benchmarks import predict_rates as pr

    return pr.committed_files()


@pytest.mark.parametrize("path", _committed(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_committed_predictions_are_for_the_cells_the_harness_will_send(path):
    """benchmarks/predict_rates.py wrote each model's figures for the open-loop cells before
    they ran (tests/fixtures/gpu/rate-predictions-{h100,h200}.json, the first model's;
    rate-predictions/<date>/<gpu>-<set>.json, each later calibration's): they hold only while
    the harness sends those cells (keys, seeds, Poisson times, the held-out side) as it did
    when they were written. The current calibration's files are still what the script
    predicts; an older model's stay as they were committed, the record of what it said."""
    from benchmarks import predict_rates as pr
    from pdctl.capacity.gpus import GPUS
    from pdctl.capacity.steptime import calibration_for

    committed = json.loads(path.read_text())
    gpu, cell_set = committed["gpu"], committed.get("set", "main")
    assert committed.get("calibration_gpu", gpu) in (gpu, "H100-SXM")
    # filed under its calibration
    assert path.parent.name in (committed["calibration"].replace(":", ""), "gpu")
    workloads = sp.RATE_SETS[cell_set][0]
    sent = {}
    for model in pr.MODELS:
        for key, cell in pr.rate_doc(model, gpu, cell_set)["cells"].items():
            sent[key] = (len(cell["raw"]), cell_set == "fresh" or sp.held_out(key))
            # drive.py gives a repeat its first run's seed, so `#2` sends the same times
            again = sp.rate_key(model, key.split("/")[1], cell["rate"], 2)
            assert pr.seed_of(again) == pr.seed_of(key)
    assert sent == {k: (c["requests"], c["held_out"]) for k, c in committed["cells"].items()}
    assert len(sent) == 2 * sum(len(w[3]) for w in workloads)
    assert all(c["ttft"] > 0 and c["tpot"] > 0 for c in committed["cells"].values())
    current = calibration_for(GPUS[gpu], pr.ENGINE).provenance["fitted"]
    if committed["calibration"] == current:
        assert pr.predictions(gpu, cell_set)["cells"] == committed["cells"]
    else:
        assert committed["calibration"] < current


def test_fresh_cells_were_never_fitted_on():
    """The fresh cells' keys appear in no calibration's fitted cells: they judge the model."""
    from pdctl.capacity.steptime import calibrations

    fresh = {sp.rate_key(m, w, r) for m in ("qwen3-8b", "mistral-7b")
             for w, _, _, rates in sp.FRESH_RATE_WORKLOADS for r in rates}
    main = {sp.rate_key(m, w, r) for m in ("qwen3-8b", "mistral-7b")
            for w, _, _, rates in sp.RATE_WORKLOADS for r in rates}
    assert len(fresh) == 8 and not fresh & main
    for cal in calibrations():
        fitted = {k.split("#")[0] for k in cal.provenance.get("cells_fitted", [])}
        assert not fresh & fitted, cal.gpu


def test_the_rate_recordings_give_the_figures_docs_quote(capsys):
    """tests/fixtures/gpu/vllm023-h100-c/rates against the predictions committed before they
    ran: the held-out and all-cell errors docs/performance.md quotes, and a repeat `#2` close
    to its first run (the open loop's noise floor)."""
    from pathlib import Path

    from benchmarks import predict_rates as pr

    root = Path(__file__).resolve().parents[2]
    recs = sorted((root / "tests/fixtures/gpu/vllm023-h100-c/rates").glob("*.json"))
    assert [r.stem for r in recs] == ["mistral-7b", "qwen3-8b"]
    pr.check(recs, None)
    out = capsys.readouterr().out
    assert "MAPE, every cell: ttft 24.2% (16), tpot 11.9% (16), throughput 0.7% (16)" in out
    assert "MAPE, held out: ttft 27.3% (10), tpot 9.3% (10), throughput 0.8% (10)" in out
    doc = (root / "docs/performance.md").read_text()
    assert "**TTFT 27.3%, TPOT 9.3%, throughput 0.8%**" in doc
    for rec in recs:
        cells = json.loads(rec.read_text())["cells"]
        for key, cell in cells.items():
            if "#" in key:
                first = cells[key.split("#")[0]]
                assert abs(cell["ttft_ms"]["p50"] / first["ttft_ms"]["p50"] - 1) < 0.021
                assert abs(cell["tpot_ms"]["p50"] / first["tpot_ms"]["p50"] - 1) < 0.015


def test_committed_predictions_never_change():
    """Each predictions file is written once, before its cells run: rate-predictions/SHA256SUMS
    pins every one, so a later refit cannot rewrite what a model said (a new calibration files
    its own under rate-predictions/<fitted>/, and predict_rates.py --write never overwrites)."""
    import hashlib

    from benchmarks import predict_rates as pr

    sums = pr.BY_CALIBRATION / "SHA256SUMS"
    pinned = {}
    for line in sums.read_text().splitlines():
        digest, name = line.split()
        pinned[name] = digest
    files = {p.relative_to(pr.FIXTURES).as_posix(): p for p in pr.committed_files()}
    assert set(files) == set(pinned), "add the new file's sha256 to rate-predictions/SHA256SUMS"
    for name, path in files.items():
        assert hashlib.sha256(path.read_bytes()).hexdigest() == pinned[name], name


def test_predictions_are_written_once(tmp_path, monkeypatch):
    from benchmarks import predict_rates as pr

    monkeypatch.setattr(pr, "BY_CALIBRATION", tmp_path)
    doc = {"gpu": "H100-SXM", "set": "fresh", "calibration": "2026-12-07T10:15",
           "commit": "abc", "cells": {}}
    path = pr.write(doc)
    assert path == tmp_path / "2026-12-07T1015" / "h100-fresh.json"
    with pytest.raises(SystemExit, match="written once"):
        pr.write(doc)
    with pytest.raises(SystemExit, match="commit the model first"):
        pr.write({**doc, "set": "main", "commit": "abc+changes"})
