"""Suspect KV events (issue 36): the lines a real NIXL prefill engine logged when a KV lease
expired and decode then read the freed blocks (answered 200 OK), found in its log, named by
the prefill -> decode pair, and turned into failures by bench, the canary and top's verdicts."""

from __future__ import annotations

from pathlib import Path

from pdctl.bench.canary import Answer, judge, verdict_line
from pdctl.bench.report import problems as _problems
from pdctl.cli.bench_show import show
from pdctl.top.kv_events import counter_events, new_lines, scan, summary
from pdctl.top.verdict import verdicts
from pdctl.top.window import Figures, Window

LOG = (Path(__file__).parent / "data" / "nixl-prefill-lease.log").read_text()
NAMES = {"127.0.0.1:18810": "pdr-prefill-0", "127.0.0.1:18820": "pdr-decode-0"}
PEERS = {"prefill": ["pdr-prefill-0"], "decode": ["pdr-decode-0"]}


def test_the_recorded_prefill_log_gives_the_two_events_with_the_pair():
    events = scan("pdr-prefill-0", "prefill", LOG, NAMES, PEERS)
    assert [e.kind for e in events] == ["lease-expired", "invalid-kv"]
    assert {e.pair for e in events} == {"pdr-prefill-0 -> pdr-decode-0"}
    assert "Potentially invalid KV blocks for unrecognized request" in events[1].line
    assert "[pull_worker.py:667]" in events[1].line  # the line as logged


def test_lines_without_the_router_id_take_the_pair_from_who_logged_them():
    line = "(EngineCore pid=1) ERROR 12-05 08:10:25 [base_worker.py:1378] NIXL transfer "
    line += "failure: transfer_failed | Context: {}"
    (e,) = scan("d-0", "decode", line, {}, {"prefill": ["p-0"], "decode": ["d-0"]})
    assert (e.kind, e.pair) == ("transfer-failed", "p-0 -> d-0")
    (e,) = scan("d-0", "decode", line, {}, {"prefill": ["p-0", "p-1"], "decode": ["d-0"]})
    assert e.pair == "? -> d-0"
    mooncake = ("WARNING 12-05 [mooncake_connector.py:1107] Request r1 expired before sending "
                "on P side.")
    (e,) = scan("p-0", "prefill", mooncake, {}, {"prefill": ["p-0"], "decode": ["d-0"]})
    assert (e.kind, e.pair) == ("lease-expired", "p-0 -> d-0")


def test_new_lines_are_what_the_log_gained_between_two_reads():
    lines = LOG.splitlines(keepends=True)
    before = "".join(lines[:5])
    assert new_lines(before, "".join(lines[2:])) == "".join(lines[5:])
    assert new_lines(before, before) == ""
    assert new_lines("", LOG) == LOG
    assert new_lines("gone\n", LOG) == LOG  # rotated, or more than one read: all of it


def step(failures: list[str], failed: int = 0) -> dict:
    return {"load": "rate 2", "measured": {"failed": failed, "completed": 10},
            "failures": failures}


def test_a_bench_step_with_suspect_events_fails_though_no_request_failed():
    events = scan("pdr-prefill-0", "prefill", LOG, NAMES, PEERS)
    report = {"steps": [step(summary(events))], "canary": None}
    problems = _problems(report)
    assert len(problems) == 1
    assert problems[0].startswith("rate 2: suspect KV transfers: pdr-prefill-0 -> pdr-decode-0: "
                                  "1 lease-expired event")
    assert _problems({"steps": [step([])], "canary": None}) == []


def test_the_canary_fails_on_suspect_events_and_names_the_pair():
    events = scan("pdr-prefill-0", "prefill", LOG, NAMES, PEERS)
    same = Answer(("1", "2"), "ab")
    v = judge([same], [same], 2, NAMES, "pdr-prefill-0", 64.0, {}, "pdr-prefill-0 -> "
              "pdr-decode-0", events)
    assert not v.ok
    assert v.failed_pairs == ["pdr-prefill-0 -> pdr-decode-0"]
    line = verdict_line(v)
    assert line.startswith("P/D canary failed for pdr-prefill-0 -> pdr-decode-0: suspect KV: ")
    assert "invalid-kv" in line
    ok = judge([same], [same], 2, NAMES, "pdr-prefill-0", 64.0, {}, "pdr-prefill-0 -> "
               "pdr-decode-0")
    assert ok.ok and verdict_line(ok).startswith("P/D canary passed: 1 greedy prompts agree on 2")


def test_a_prefill_counter_that_grew_is_a_top_verdict_naming_the_pair():
    """NIXL counts an expired lease on prefill: the old canary and verdicts read decode only."""
    pre = Figures("p-0", "prefill", "h", 60,
                  connector_errors={"vllm:nixl_num_kv_expired_reqs_total": 3.0})
    dec = Figures("d-0", "decode", "h", 60)
    w = Window("pd", 2, "hosts", 60.0, (pre, dec))
    found = verdicts(w, peers={"prefill": ["p-0"], "decode": ["d-0"]})
    assert [v.key for v in found] == ["kv-suspect"]
    assert found[0].line.startswith("p-0 -> d-0: 1 counter event")
    assert "nixl_num_kv_expired_reqs_total +3" in found[0].line
    assert counter_events(dec, {}) == []


def test_top_shows_logged_events_and_a_failed_canary_first():
    events = scan("pdr-prefill-0", "prefill", LOG, NAMES, PEERS)
    w = Window("pd", 2, "hosts", 60.0, ())
    found = verdicts(w, events=events, canary=(False, "P/D canary failed for a -> b: x"))
    assert [v.key for v in found] == ["pd-canary-failed", "kv-suspect", "kv-suspect"]
    assert found[2].line.startswith("pdr-prefill-0 -> pdr-decode-0: 1 invalid-kv event")


def test_the_bench_table_prints_the_failure_with_the_log_line_as_logged(capsys):
    events = scan("pdr-prefill-0", "prefill", LOG, NAMES, PEERS)
    s = step(summary(events))
    s.update(driver="lo1", measured={"failed": 0, "completed": 10, "durationS": 5.0},
             metrics={"instances": [], "gpus": []}, kvEvents=[{}, {}])
    show({"name": "pdr", "phase": 2, "specHash": "x", "engines": [], "endpoint": "e",
          "plan": {"basis": "-"}, "canary": None, "steps": [s]})
    out = " ".join(capsys.readouterr().out.split())
    assert "0 failed, 2 suspect KV events" in out
    assert "FAILED suspect KV: pdr-prefill-0 -> pdr-decode-0" in out
    assert "[base_worker.py:3032] Releasing expired KV blocks" in out


def test_mooncake_transfer_engine_failures_count_as_failed_transfers():
    """The transfer engine's own glog lines (0.3.13.post1 engine.so's strings; Mooncake#4209
    quotes the first): a failure even where vLLM logs nothing for minutes."""
    peers = {"prefill": ["p-0"], "decode": ["d-0"]}
    lines = [
        "W1206 12:00:01.000001  4242 tcp_transport.cpp:300] TCP lane queue-full rejection "
        "count: 512",
        "E1206 12:00:01.000002  4242 tcp_transport.cpp:310] Failed to admit TCP work for "
        "127.0.0.2:15001",
        "E1206 12:00:01.000003  4242 tcp_transport.cpp:320] TcpTransport::getConnection failed "
        "to create connection to 127.0.0.2:15001",
        "I1206 12:00:31.000004  4243 transfer_engine_py.cpp:454] Sync batch data transfer "
        "timeout after 33061142969ns",
    ]
    events = scan("p-0", "prefill", "\n".join(lines), {}, peers)
    assert [e.kind for e in events] == ["transfer-failed"] * 4
    assert {e.pair for e in events} == {"p-0 -> d-0"}
    queue, admit, connect, timeout = (e.meaning for e in events)
    assert queue == admit and queue.startswith("Mooncake's TCP queue to that decode was full: "
                                               "the KV pull was refused"), queue
    assert "MC_TCP_ settings" in queue and "docs/troubleshooting.md" in queue
    assert connect == timeout == "Mooncake's transfer engine dropped a KV transfer"
    quiet = "I1206 12:00:00.000001  4242 tcp_transport.cpp:100] TcpTransport: listen on port 15001"
    assert scan("p-0", "prefill", quiet, {}, peers) == []
