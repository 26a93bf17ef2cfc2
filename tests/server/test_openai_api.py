"""The OpenAI API through the real `openai` client against a real kestrel server."""
import concurrent.futures as futures

import httpx
import openai
import pytest

from conftest import MODEL_NAME, Server

# Documented greedy continuation of stories260K (llama2.c); the engine test checks the ids.
GREEDY_AFTER_ONCE = ", there was a little girl named Lily. She loved to play outside in the park."


def test_models_and_health(server, client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    assert httpx.get(server.base + "/health").status_code == 200


def test_completion_greedy_matches_documented_text(client):
    r = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=30, temperature=0)
    assert r.object == "text_completion"
    assert r.choices[0].text.startswith(GREEDY_AFTER_ONCE)
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 30
    assert r.usage.prompt_tokens == 5  # BOS + 4 tokens
    assert r.usage.total_tokens == 35


def test_streaming_completion_equals_non_streaming(client):
    kwargs = dict(model=MODEL_NAME, prompt="Tom had a red ball", max_tokens=40, temperature=0)
    whole = client.completions.create(**kwargs).choices[0].text
    chunks = list(client.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == whole
    finished = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finished) == 1 and finished[0].choices[0].finish_reason == "length"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 40


def test_stream_ends_with_done_marker(server):
    with httpx.stream("POST", server.base + "/v1/completions",
                      json={"prompt": "Hi", "max_tokens": 5, "stream": True}, timeout=60) as r:
        lines = [l for l in r.iter_lines() if l]
    assert lines[-1] == "data: [DONE]"
    assert all(l.startswith("data: ") for l in lines)


def test_chat_completion_and_stream(client):
    messages = [{"role": "system", "content": "You tell stories."},
                {"role": "user", "content": "Tell me about a cat."}]
    r = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=24, temperature=0)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert len(r.choices[0].message.content) > 0
    stream = client.chat.completions.create(model=MODEL_NAME, messages=messages, max_tokens=24,
                                            temperature=0, stream=True)
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == r.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_n_two_choices_differ_and_seed_reproduces(client):
    kwargs = dict(model=MODEL_NAME, prompt="One day", max_tokens=30, temperature=1.0, n=2, seed=7)
    a = client.completions.create(**kwargs)
    b = client.completions.create(**kwargs)
    assert [c.index for c in a.choices] == [0, 1]
    assert a.choices[0].text != a.choices[1].text
    assert [c.text for c in a.choices] == [c.text for c in b.choices]
    assert a.usage.completion_tokens == 60
    c = client.completions.create(**{**kwargs, "seed": 8})
    assert [x.text for x in c.choices] != [x.text for x in a.choices]


def test_logprobs_completions_and_chat(client):
    r = client.completions.create(model=MODEL_NAME, prompt="The dog", max_tokens=8, temperature=0, logprobs=3)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == 8
    assert "".join(lp.tokens).strip() == r.choices[0].text.strip()
    for token, logprob, top in zip(lp.tokens, lp.token_logprobs, lp.top_logprobs):
        assert logprob <= 0.0
        assert len(top) == 3
        # Greedy: the chosen token is the most likely one.
        assert max(top.values()) == pytest.approx(logprob)
    chat = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "hi"}],
                                          max_tokens=5, temperature=0, logprobs=True, top_logprobs=2)
    content = chat.choices[0].logprobs.content
    assert len(content) == 5
    assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in content)


def test_stop_strings_are_not_emitted_even_across_tokens(client):
    base = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=30,
                                     temperature=0).choices[0].text
    assert "little girl" in base
    # " little gi" ends in the middle of a token.
    r = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=30,
                                  temperature=0, stop=["zzz", " little gi"])
    assert r.choices[0].finish_reason == "stop"
    assert r.choices[0].text == base[: base.index(" little gi")]
    stream = client.completions.create(model=MODEL_NAME, prompt="Once upon a time", max_tokens=30,
                                       temperature=0, stop=" little gi", stream=True)
    assert "".join(c.choices[0].text for c in stream) == r.choices[0].text


def test_token_list_prompt_and_multiple_prompts(client):
    r = client.completions.create(model=MODEL_NAME, prompt=[1, 403, 407, 261, 378], max_tokens=6, temperature=0)
    assert r.choices[0].text.startswith(", there")
    multi = client.completions.create(model=MODEL_NAME, prompt=["Once upon a time", "The cat"],
                                      max_tokens=6, temperature=0)
    assert len(multi.choices) == 2
    assert multi.choices[0].text == r.choices[0].text


def test_32_concurrent_clients_get_the_same_greedy_text(server):
    client = server.client()
    prompts = [f"Story number {i % 8}: once" for i in range(32)]
    alone = {p: client.completions.create(model=MODEL_NAME, prompt=p, max_tokens=24, temperature=0).choices[0].text
             for p in set(prompts)}

    def one(p):
        return p, server.client().completions.create(model=MODEL_NAME, prompt=p, max_tokens=24,
                                                     temperature=0).choices[0].text
    with futures.ThreadPoolExecutor(32) as pool:
        results = list(pool.map(one, prompts))
    for p, text in results:
        assert text == alone[p]
    server.wait_idle()


def test_client_disconnect_mid_stream_frees_blocks(server):
    before = server.metrics()
    with httpx.stream("POST", server.base + "/v1/completions",
                      json={"prompt": "Once", "max_tokens": 1500, "stream": True, "ignore_eos": True},
                      timeout=60) as r:
        seen = 0
        for line in r.iter_lines():
            if line.startswith("data: "):
                seen += 1
            if seen >= 5:
                break
    m = server.wait_idle()
    assert m["kestrel_request_success_total"] > before["kestrel_request_success_total"]
    # The aborted request was counted as an abort, not a completion of 1500 tokens.
    assert m["kestrel_generation_tokens_total"] - before["kestrel_generation_tokens_total"] < 1500


def test_metrics_exposition(server, client):
    client.completions.create(model=MODEL_NAME, prompt="Hello", max_tokens=3)
    text = httpx.get(server.base + "/metrics").text
    for name in ["kestrel_time_to_first_token_seconds_bucket", "kestrel_time_per_output_token_seconds_count",
                 "kestrel_e2e_request_latency_seconds_sum", "kestrel_request_queue_time_seconds_count",
                 "kestrel_num_requests_running", "kestrel_num_requests_waiting",
                 "kestrel_kv_cache_blocks_used", "kestrel_kv_cache_blocks_total",
                 "kestrel_prefix_cache_hit_rate", "kestrel_prompt_tokens_total",
                 "kestrel_generation_tokens_total", "kestrel_num_preemptions_total"]:
        assert name in text, name
    m = server.metrics()
    assert m["kestrel_kv_cache_blocks_total"] == 512
    assert m["kestrel_generation_tokens_total"] > 0


def test_prefix_cache_hits_for_a_shared_prompt(server, client):
    before = server.metrics()
    system = "Once upon a time there was a big dog. " * 8
    for suffix in ["He ran.", "She sat.", "They ate."]:
        client.completions.create(model=MODEL_NAME, prompt=system + suffix, max_tokens=4, temperature=0)
    after = server.metrics()
    assert after["kestrel_prefix_cache_hits_total"] - before["kestrel_prefix_cache_hits_total"] >= 2 * 64


def test_usage_reports_the_prefix_cache_hit(client):
    # A prompt no other test sends: nothing of it is cached the first time; the second time every
    # full 16-token block before the last token comes from the prefix cache (the last token is
    # always computed, to produce logits).
    prompt = "Grandpa Zed counted " + "seven green frogs and a tiny owl. " * 6
    first = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=2, temperature=0)
    second = client.completions.create(model=MODEL_NAME, prompt=prompt, max_tokens=2, temperature=0)
    n = first.usage.prompt_tokens
    assert n == second.usage.prompt_tokens and n > 48
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    cached = second.usage.prompt_tokens_details.cached_tokens
    assert ((n - 1) // 16) * 16 - 16 <= cached <= n - 1, (cached, n)
    assert second.choices[0].text == first.choices[0].text
