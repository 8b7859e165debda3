"""The canary's comparison: agreeing tokens pass, a divergence, an error, no KV received or a
connector error fail, and the failure names the engines."""

from __future__ import annotations

from pdctl.bench.canary import Answer, agree, answer_of, judge, payload, prompts

NAMES = {"127.0.0.1:8100": "pd-prefill-0", "127.0.0.1:8200": "pd-decode-0"}


def routed(tokens: tuple[str, ...]) -> dict:
    return {
        "id": "cmpl-___prefill_addr_127.0.0.1:8100___decode_addr_127.0.0.1:8200_abc",
        "choices": [{"text": "x", "logprobs": {"tokens": list(tokens)}}],
    }


def plain(tokens: tuple[str, ...]) -> dict:
    return {"id": "cmpl-1", "choices": [{"text": "x", "logprobs": {"tokens": list(tokens)}}]}


IDS = tuple(f"token_id:{i}" for i in (5, 9, 2, 7))


def test_agreeing_answers_with_kv_received_pass():
    v = judge([answer_of(200, routed(IDS))], [answer_of(200, plain(IDS))], 4, NAMES,
              "pd-prefill-0", kv_received=64.0, connector_errors={})
    assert v.ok and v.pairs[0].via == "pd-prefill-0 -> pd-decode-0"
    assert v.lines == ()


def test_a_divergent_token_fails_and_names_the_pair_and_where():
    wrong = IDS[:2] + ("token_id:1",) + IDS[3:]
    v = judge([answer_of(200, routed(wrong))], [answer_of(200, plain(IDS))], 4, NAMES,
              "pd-prefill-0", kv_received=64.0, connector_errors={})
    assert not v.ok
    assert v.pairs[0].agree == 2
    assert "via pd-prefill-0 -> pd-decode-0 vs pd-prefill-0: differs at token 2" in v.lines[0]


def test_an_error_on_the_pd_path_fails():
    v = judge([answer_of(500, {"error": "kv load failed"})], [answer_of(200, plain(IDS))], 4,
              NAMES, "pd-prefill-0", kv_received=0.0, connector_errors={},
              engines="pd-prefill-0 -> pd-decode-0")
    assert not v.ok and "P/D path answered 500" in v.lines[0]
    assert v.lines[0].startswith("prompt 0 via pd-prefill-0 -> pd-decode-0 vs pd-prefill-0")


def test_same_tokens_without_kv_transfer_fail():
    """Decode recomputed the prompt: right tokens, but not disaggregated."""
    v = judge([answer_of(200, routed(IDS))], [answer_of(200, plain(IDS))], 4, NAMES,
              "pd-prefill-0", kv_received=0.0, connector_errors={})
    assert not v.ok and "received no prompt KV" in v.lines[-1]


def test_a_connector_error_fails_even_when_tokens_agree():
    v = judge([answer_of(200, routed(IDS))], [answer_of(200, plain(IDS))], 4, NAMES,
              "pd-prefill-0", kv_received=64.0,
              connector_errors={"vllm:nixl_num_failed_transfers_total": 1.0})
    assert not v.ok and "nixl_num_failed_transfers_total +1" in v.lines[0]


def test_no_prompts_is_not_a_pass():
    assert not judge([], [], 4, NAMES, "p", kv_received=64.0, connector_errors={}).ok


def test_text_is_compared_where_no_token_ids_came_back():
    a, b = Answer(text="hello world"), Answer(text="hello there")
    assert agree(a, b) == 6
    v = judge([a], [b], 4, NAMES, "p", kv_received=64.0, connector_errors={})
    assert not v.ok and "text differs" in v.lines[0]


def test_prompts_and_payload_are_deterministic_and_greedy():
    assert prompts(3, 7) == prompts(3, 7) != prompts(3, 8)
    assert prompts(1, 7, "run a1")[0] == "run a1 " + prompts(1, 7)[0]
    body = payload("m", "p", 8, 7)
    assert "logprobs" not in body and payload("m", "p", 8, 7, token_ids=True)["logprobs"] == 1
    assert (body["temperature"], body["seed"], body["max_tokens"], body["ignore_eos"]) == (
        0, 7, 8, True)
