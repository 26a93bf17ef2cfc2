"""Bad input gets the right status and an OpenAI-format error; the server keeps serving."""
import json
import threading

import httpx
import openai
import pytest

from conftest import MODEL_NAME, Server


def assert_error(response, status, fragment):
    assert response.status_code == status, response.text
    body = response.json()
    assert fragment in body["error"]["message"], body
    assert "type" in body["error"]


def still_serves(server):
    assert httpx.get(server.base + "/health").status_code == 200
    r = server.client().completions.create(model=MODEL_NAME, prompt="Hi", max_tokens=3)
    assert len(r.choices) == 1


def test_malformed_json(server):
    r = httpx.post(server.base + "/v1/completions", content=b'{"prompt": "x", ', headers={"Content-Type": "application/json"})
    assert_error(r, 400, "malformed JSON")
    still_serves(server)


@pytest.mark.parametrize("body, fragment", [
    ({"prompt": "x", "temperature": 5}, "temperature"),
    ({"prompt": "x", "max_tokens": "ten"}, "max_tokens"),
    ({"prompt": "x", "n": 0}, "'n'"),
    ({"prompt": "x", "top_p": 0}, "top_p"),
    ({"prompt": "x", "stop": 3}, "stop"),
    ({"prompt": [1, 2, 99999]}, "outside the vocabulary"),
    ({"max_tokens": 3}, "'prompt' is required"),
    ([1, 2], "JSON object"),
])
def test_bad_parameters(server, body, fragment):
    r = httpx.post(server.base + "/v1/completions", json=body)
    assert_error(r, 400, fragment)


def test_bad_parameter_through_the_openai_client(client):
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model=MODEL_NAME, prompt="x", temperature=9)


def test_prompt_longer_than_context(server):
    r = httpx.post(server.base + "/v1/completions", json={"prompt": "the cat " * 2000, "max_tokens": 4})
    assert_error(r, 400, "context")
    r = httpx.post(server.base + "/v1/completions", json={"prompt": "hello", "max_tokens": 5000})
    assert_error(r, 400, "context length")
    still_serves(server)


def test_unknown_model_and_route(server):
    r = httpx.post(server.base + "/v1/completions", json={"model": "gpt-9", "prompt": "x"})
    assert_error(r, 404, "gpt-9")
    r = httpx.get(server.base + "/v1/nothing-here")
    assert_error(r, 404, "no route")
    with pytest.raises(openai.NotFoundError):
        server.client().completions.create(model="gpt-9", prompt="x")


def test_chat_without_template_is_a_clear_error():
    s = Server()
    try:
        r = httpx.post(s.base + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert_error(r, 400, "no chat template")
        still_serves(s)
    finally:
        s.stop()


def test_api_key():
    s = Server("--api-key", "sekret")
    try:
        r = httpx.post(s.base + "/v1/completions", json={"prompt": "x"}, headers={"Authorization": "Bearer wrong"})
        assert_error(r, 401, "API key")
        r = httpx.post(s.base + "/v1/completions", json={"prompt": "x"})
        assert r.status_code == 401
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=s.base + "/v1", api_key="wrong", max_retries=0).models.list()
        assert httpx.get(s.base + "/health").status_code == 200  # probes need no key
        # The scheme is case-insensitive (RFC 7235).
        for scheme in ("bearer", "BEARER", "Bearer"):
            r = httpx.get(s.base + "/v1/models", headers={"Authorization": f"{scheme} sekret"})
            assert r.status_code == 200, scheme
        assert httpx.post(s.base + "/tokenize", json={"content": "x"}).status_code == 401
        still_serves(s)
    finally:
        s.stop()


def test_body_too_large():
    s = Server("--max-body-bytes", "1000")
    try:
        r = httpx.post(s.base + "/v1/completions", json={"prompt": "x" * 5000})
        assert r.status_code == 413
        assert "too large" in r.json()["error"]["message"]
        still_serves(s)
    finally:
        s.stop()


def test_queue_full_gives_503():
    s = Server("--max-queue", "1", "--max-num-seqs", "1")
    try:
        long = {"prompt": "Once", "max_tokens": 1000, "ignore_eos": True}
        statuses = []
        refusals = []
        lock = threading.Lock()

        def send():
            r = httpx.post(s.base + "/v1/completions", json=long, timeout=300)
            with lock:
                statuses.append(r.status_code)
                if r.status_code == 503:
                    refusals.append((r.json()["error"]["message"], r.headers.get("retry-after")))
        threads = [threading.Thread(target=send) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert 503 in statuses and 200 in statuses, statuses
        # Threads cannot fail the test: what they saw is checked here.
        assert all("overloaded" in message and retry == "1" for message, retry in refusals), refusals
        s.wait_idle()
        still_serves(s)
    finally:
        s.stop()
