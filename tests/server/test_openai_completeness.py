"""OpenAI completeness: prompt scoring (echo + logprobs, max_tokens 0) as lm-evaluation-harness uses it,
text_offset in characters, /v1/models/{id}, /tokenize and /detokenize, unknown fields, numbers out of
range, error codes, and non-streaming responses that keep their status until the result is known."""
import json
import math
import socket
import threading
import time

import httpx
import openai
import pytest

from conftest import MODEL_NAME, Server


def post(server, body, path="/v1/completions"):
    return httpx.post(server.base + path, json=body, timeout=120)


def tokenize(server, text, add_special=True):
    r = post(server, {"content": text, "add_special": add_special}, "/tokenize")
    assert r.status_code == 200, r.text
    return r.json()["tokens"]


def ids_of(logprobs):
    return [int(t.split(":", 1)[1]) for t in logprobs["tokens"]]


def test_prompt_logprobs_equal_the_logprobs_of_the_same_tokens_generated(server):
    prompt = tokenize(server, "Once upon a time, there was a little girl")
    gen = post(server, {"prompt": prompt, "max_tokens": 8, "temperature": 0, "logprobs": 3,
                        "return_tokens_as_token_ids": True}).json()
    generated = gen["choices"][0]["logprobs"]
    gen_ids = ids_of(generated)
    assert len(gen_ids) == 8

    scored = post(server, {"prompt": prompt + gen_ids, "max_tokens": 0, "echo": True, "logprobs": 3,
                           "return_tokens_as_token_ids": True}).json()
    choice = scored["choices"][0]
    lp = choice["logprobs"]
    assert ids_of(lp) == prompt + gen_ids
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(x is not None and x <= 0 for x in lp["token_logprobs"][1:])
    for k in range(8):
        assert lp["token_logprobs"][len(prompt) + k] == pytest.approx(generated["token_logprobs"][k], abs=2e-3)
        # Greedy: the generated token is the top alternative at its position in both.
        top = lp["top_logprobs"][len(prompt) + k]
        assert len(top) == 3
        assert max(top.values()) == pytest.approx(lp["token_logprobs"][len(prompt) + k], abs=1e-6)
    assert choice["finish_reason"] == "length"
    assert scored["usage"]["completion_tokens"] == 0
    assert scored["usage"]["prompt_tokens"] == len(prompt) + 8

    # The same scores streamed: the echo chunk carries them.
    with httpx.stream("POST", server.base + "/v1/completions", timeout=60,
                      json={"prompt": prompt + gen_ids, "max_tokens": 0, "echo": True, "logprobs": 3,
                            "return_tokens_as_token_ids": True, "stream": True}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    streamed = [x for c in chunks if c["choices"] and c["choices"][0]["logprobs"] for x in c["choices"][0]["logprobs"]["token_logprobs"]]
    assert streamed[0] is None
    assert streamed[1:] == pytest.approx(lp["token_logprobs"][1:], abs=1e-6)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_prompt_scores_do_not_depend_on_chunking(server):
    prompt = tokenize(server, "The little dog ran to the park and played with a red ball all day long. " * 3)
    small = Server("--max-num-batched-tokens", "8")
    try:
        body = {"prompt": prompt, "max_tokens": 0, "echo": True, "logprobs": 0}
        whole = post(server, body).json()["choices"][0]["logprobs"]["token_logprobs"]
        chunked = post(small, body).json()["choices"][0]["logprobs"]["token_logprobs"]
    finally:
        small.stop()
    assert len(whole) == len(prompt) > 40
    assert whole[0] is None and chunked[0] is None
    assert chunked[1:] == pytest.approx(whole[1:], abs=2e-3)


def test_lm_eval_loglikelihood_request_shape(server):
    """lm-evaluation-harness's local-completions loglikelihood: token prompts (context +
    continuation), max_tokens 1, echo, logprobs 1; it sums token_logprobs[ctxlen:-1] and calls a
    continuation greedy when each of its tokens is the top alternative."""
    ctx = tokenize(server, "Once upon a time, there was a")
    greedy = post(server, {"prompt": ctx, "max_tokens": 1, "temperature": 0, "logprobs": 1,
                           "return_tokens_as_token_ids": True}).json()["choices"][0]["logprobs"]
    greedy_cont = ids_of(greedy)
    other_cont = tokenize(server, " zebra", add_special=False)
    body = {"model": MODEL_NAME, "prompt": [ctx + greedy_cont, ctx + other_cont], "temperature": 0,
            "max_tokens": 1, "logprobs": 1, "seed": 1234, "echo": True}
    out = post(server, body).json()
    results = []
    for choice, cont in zip(sorted(out["choices"], key=lambda c: c["index"]), [greedy_cont, other_cont]):
        lp = choice["logprobs"]
        assert len(lp["token_logprobs"]) == len(ctx) + len(cont) + 1
        tokens_logprobs = lp["token_logprobs"][len(ctx):-1]
        top = lp["top_logprobs"][len(ctx):-1]
        is_greedy = all(tok == max(t.values()) for tok, t in zip(tokens_logprobs, top))
        results.append((sum(tokens_logprobs), is_greedy))
    assert results[0][1] is True and results[1][1] is False
    assert results[0][0] == pytest.approx(greedy["token_logprobs"][0], abs=2e-3)
    assert results[1][0] < results[0][0]


def test_text_offset_counts_characters(server):
    text = "日本語のテキスト and 中文 text"
    ids = tokenize(server, text)
    pieces = post(server, {"content": text, "add_special": True, "with_pieces": True}, "/tokenize").json()["tokens"]
    as_bytes = [p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"]) for p in pieces]
    lp = post(server, {"prompt": ids, "max_tokens": 0, "echo": True, "logprobs": 0}).json()["choices"][0]["logprobs"]
    offsets = lp["text_offset"]
    assert len(offsets) == len(ids) == len(as_bytes)
    checked = 0
    prefix = b""
    for i, piece in enumerate(as_bytes):
        try:
            expected = len(prefix.decode("utf-8"))  # Python counts characters
        except UnicodeDecodeError:
            expected = None  # the token starts inside a character
        if expected is not None:
            assert offsets[i] == expected, (i, offsets, as_bytes)
            checked += 1
        prefix += piece
    assert checked >= 5
    assert offsets == sorted(offsets)
    assert offsets[-1] < len(b"".join(as_bytes[:-1]))  # not bytes


def test_models_retrieve(client):
    model = client.models.retrieve(MODEL_NAME)
    assert model.id == MODEL_NAME
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_tokenize_and_detokenize(server):
    text = "Once upon a time"
    ids = tokenize(server, text, add_special=False)
    assert len(ids) >= 3
    with_bos = tokenize(server, text, add_special=True)
    assert len(with_bos) == len(ids) + 1 and with_bos[1:] == ids
    r = post(server, {"tokens": ids}, "/detokenize")
    assert r.json() == {"content": text}
    pieces = post(server, {"content": text, "with_pieces": True}, "/tokenize").json()["tokens"]
    assert [p["id"] for p in pieces] == ids
    assert "".join(p["piece"] for p in pieces).strip() == text
    r = post(server, {"tokens": [10 ** 9]}, "/detokenize")
    assert r.status_code == 400 and r.json()["error"]["param"] == "tokens"


def test_unknown_fields_are_refused_by_name(server, client):
    r = post(server, {"prompt": "x", "max_tokens": 1, "frobnicate": 1, "temprature": 0.5})
    assert r.status_code == 400
    err = r.json()["error"]
    assert "frobnicate" in err["message"] and "temprature" in err["message"]
    assert err["param"] == "frobnicate"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}],
                                       max_tokens=1, extra_body={"no_such_option": True})
    # Extras this server implements, and OpenAI's `user`, are accepted.
    r = post(server, {"prompt": "x", "max_tokens": 1, "top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1,
                      "user": "someone"})
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("raw_body, param", [
    (b'{"prompt": "x", "temperature": 1e400}', "temperature"),
    (b'{"prompt": "x", "max_tokens": 1e400}', "max_tokens"),
    (b'{"prompt": "x", "max_tokens": 99999999999999999999999}', "max_tokens"),
    (b'{"prompt": "x", "top_p": -1e400}', "top_p"),
])
def test_numbers_that_do_not_fit_are_400(server, raw_body, param):
    r = httpx.post(server.base + "/v1/completions", content=raw_body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, r.text
    assert isinstance(r.json()["error"]["code"], str)


def test_error_codes_are_strings(server):
    cases = [
        httpx.post(server.base + "/v1/completions", content=b"{", headers={"Content-Type": "application/json"}),
        httpx.post(server.base + "/v1/completions", json={"prompt": "x", "n": 0}),
        httpx.get(server.base + "/v1/nothing"),
        httpx.get(server.base + "/v1/completions"),
        httpx.post(server.base + "/v1/completions", json={"model": "other", "prompt": "x"}),
    ]
    for r in cases:
        assert r.status_code >= 400
        code = r.json()["error"]["code"]
        assert isinstance(code, str) and code, r.text


def test_max_tokens_zero_needs_echo(server):
    r = post(server, {"prompt": "x", "max_tokens": 0})
    assert r.status_code == 400 and "echo" in r.json()["error"]["message"]


def test_whole_responses_keep_their_status_and_notice_clients_leaving():
    s = Server("--attention-sinks", "4")
    try:
        # A response that takes a while: no bytes before the result (no whitespace heartbeats).
        r = httpx.post(s.base + "/v1/completions", timeout=120,
                       json={"prompt": "Once", "max_tokens": 1500, "ignore_eos": True})
        assert r.status_code == 200 and r.content.startswith(b"{")
        assert r.json()["usage"]["completion_tokens"] == 1500
        # A client that leaves while its request runs: the request is aborted, not run to the end.
        body = json.dumps({"prompt": "Once", "max_tokens": 1000000, "ignore_eos": True}).encode()
        with socket.create_connection(("127.0.0.1", s.port), timeout=5) as c:
            c.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            time.sleep(1.0)
            assert s.metrics()["kestrel_num_requests_running"] == 1
        m = s.wait_idle(timeout=10)
        assert m["kestrel_kv_cache_blocks_used"] == 0
    finally:
        s.stop()
