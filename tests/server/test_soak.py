"""Bounded soak: 500 requests of random lengths, random streaming, random client disconnects.

Ends with no leaked KV block and no failure of a request that should have succeeded."""
import concurrent.futures as futures
import random

import httpx

from conftest import Server

NUM_REQUESTS = 500


def one_request(base, rng_seed):
    rng = random.Random(rng_seed)
    prompt = [1] + [rng.randrange(3, 512) for _ in range(rng.randrange(0, 300))]
    body = {"prompt": prompt, "max_tokens": rng.randrange(1, 200), "temperature": rng.choice([0, 0.8]),
            "stream": rng.random() < 0.5, "ignore_eos": rng.random() < 0.5, "seed": rng_seed}
    disconnect_after = rng.randrange(1, 20) if rng.random() < 0.2 else None
    if body["stream"]:
        with httpx.stream("POST", base + "/v1/completions", json=body, timeout=300) as r:
            if r.status_code != 200:
                return "error", r.status_code
            events = 0
            for line in r.iter_lines():
                if not line:
                    continue
                if disconnect_after is not None and events >= disconnect_after:
                    return "disconnected", None
                events += 1
                if line == "data: [DONE]":
                    return "ok", events
            return "error", "stream ended without [DONE]"
    if disconnect_after is not None:
        try:
            httpx.post(base + "/v1/completions", json=body, timeout=0.05 * disconnect_after)
        except httpx.TimeoutException:
            return "disconnected", None
        return "ok", None
    r = httpx.post(base + "/v1/completions", json=body, timeout=300)
    if r.status_code != 200:
        return "error", (r.status_code, r.text)
    choice = r.json()["choices"][0]
    if choice["finish_reason"] not in ("stop", "length"):
        return "error", choice
    if body["ignore_eos"] and r.json()["usage"]["completion_tokens"] != body["max_tokens"]:
        return "error", ("short", r.json()["usage"], body["max_tokens"])
    return "ok", None


def test_soak_no_leaks_no_failures():
    server = Server("--kv-blocks", "200", "--max-num-seqs", "16", "--max-queue", "10000")
    try:
        with futures.ThreadPoolExecutor(16) as pool:
            results = list(pool.map(lambda i: one_request(server.base, i), range(NUM_REQUESTS)))
        errors = [r for r in results if r[0] == "error"]
        assert not errors, errors[:5]
        assert sum(1 for r in results if r[0] == "disconnected") > 20
        m = server.wait_idle(timeout=120)
        assert m["kestrel_kv_cache_blocks_used"] == 0
        assert m["kestrel_request_failure_total"] == 0
        # The small pool (200 blocks of 16 tokens for 16 sequences of up to ~500 tokens) forces
        # preemptions; they happened, and failed nothing.
        assert m["kestrel_num_preemptions_total"] > 0
    finally:
        server.stop()
