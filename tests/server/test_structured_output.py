"""Structured output and tool calls through the openai client against `kestrel serve` (stories260K:
a model that writes children's stories and never JSON by itself, so every structure below comes
from the grammar). Each output is checked by an independent parser (json, re)."""
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jsonschema
import openai
import pytest
from conftest import Server

SCHEMA_SET = json.loads((Path(__file__).resolve().parents[2] / "bench" / "data" / "json_schemas.json").read_text())

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 10},
        "age": {"type": "integer", "minimum": 1, "maximum": 99},
        "mood": {"enum": ["happy", "sad"]},
    },
    "required": ["name", "age", "mood"],
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "the weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
            "required": ["city", "days"],
        },
    },
}
TIME_TOOL = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"enum": ["utc", "cet"]}},
                                                   "required": ["zone"]}},
}

MESSAGES = [{"role": "user", "content": "Tell me about a person."}]


@pytest.fixture(scope="module")
def server():
    """JSON without free whitespace (--compact-json): stories260K, free to add whitespace, would
    fill its context with blanks (a real model writes JSON as it learnt to)."""
    s = Server("--chat-template", "chatml", "--kv-blocks", "512", "--compact-json")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def client(server):
    return server.client()


def check_person(text):
    assert "\n" not in text, text  # compact JSON
    value = json.loads(text)
    assert set(value) == {"name", "age", "mood"}, text
    assert isinstance(value["name"], str) and 1 <= len(value["name"]) <= 10, text
    assert isinstance(value["age"], int) and 1 <= value["age"] <= 99, text
    assert value["mood"] in ("happy", "sad"), text


def test_response_format_json_schema_chat_and_stream(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    for seed in range(4):
        r = client.chat.completions.create(model="stories260K", messages=MESSAGES, response_format=fmt,
                                           temperature=1.0, seed=seed, max_tokens=400)
        assert r.choices[0].finish_reason == "stop", r.choices[0].message.content
        check_person(r.choices[0].message.content)
    stream = client.chat.completions.create(model="stories260K", messages=MESSAGES, response_format=fmt,
                                            temperature=1.0, seed=7, max_tokens=400, stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    check_person(text)


def test_response_format_json_object_on_completions(client):
    r = client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=120, temperature=0.9,
                                  seed=3, extra_body={"response_format": {"type": "json_object"}})
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].text), dict), r.choices[0].text
    else:  # cut by max_tokens: still a prefix of an object
        assert r.choices[0].text.lstrip().startswith("{"), r.choices[0].text


def test_vllm_structured_outputs_and_guided_fields(client):
    r = client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=40, temperature=1.0,
                                  seed=1, extra_body={"structured_outputs": {"regex": "[0-9]{3}-[a-z]{2,8}"}})
    assert re.fullmatch(r"[0-9]{3}-[a-z]{2,8}", r.choices[0].text), r.choices[0].text
    for seed in range(3):
        r = client.chat.completions.create(model="stories260K", messages=MESSAGES, max_tokens=20, temperature=1.0,
                                           seed=seed, extra_body={"guided_choice": ["sunny day", "rain", "snow"]})
        assert r.choices[0].message.content in ("sunny day", "rain", "snow")
    r = client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=40, temperature=1.0,
                                  seed=2, extra_body={"structured_outputs": {"choice": ["left", "right"]}})
    assert r.choices[0].text in ("left", "right")
    gbnf = 'root ::= "Tom has " [1-9] " " ("cats" | "dogs") "."'
    r = client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=40, temperature=1.0,
                                  seed=4, extra_body={"guided_grammar": gbnf})
    assert re.fullmatch(r"Tom has [1-9] (cats|dogs)\.", r.choices[0].text), r.choices[0].text
    r = client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=400, temperature=1.0,
                                  seed=5, extra_body={"guided_json": PERSON})
    check_person(r.choices[0].text)


def test_named_tool_choice_returns_a_tool_call(client):
    for stream in (False, True):
        kwargs = dict(model="stories260K", messages=[{"role": "user", "content": "Weather in Paris?"}],
                      tools=[WEATHER_TOOL, TIME_TOOL], tool_choice={"type": "function", "function": {"name": "get_weather"}},
                      temperature=1.0, seed=11, max_tokens=400)
        if stream:
            # As OpenAI streams a call: the first delta names it, later ones add argument text.
            chunks = [c for c in client.chat.completions.create(stream=True, **kwargs) if c.choices]
            deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
            assert len(deltas) > 2 and all(d.index == 0 for d in deltas)
            assert deltas[0].function.arguments == "" and all(d.id is None for d in deltas[1:])
            finish = chunks[-1].choices[0].finish_reason
            call = deltas[0]
            call.function.arguments = "".join(d.function.arguments for d in deltas)
        else:
            r = client.chat.completions.create(**kwargs)
            finish = r.choices[0].finish_reason
            assert r.choices[0].message.content is None
            assert len(r.choices[0].message.tool_calls) == 1
            call = r.choices[0].message.tool_calls[0]
        assert finish == "stop"
        assert call.type == "function" and call.id.startswith("call_")
        assert call.function.name == "get_weather"
        args = json.loads(call.function.arguments)
        assert set(args) == {"city", "days"} and isinstance(args["city"], str) and 1 <= args["days"] <= 7, args


def test_required_tool_choice_calls_declared_tools(client):
    # One call each (parallel_tool_calls false): the story model would otherwise list calls
    # until the context is full.
    for seed in range(3):
        r = client.chat.completions.create(model="stories260K", messages=[{"role": "user", "content": "What now?"}],
                                           tools=[WEATHER_TOOL, TIME_TOOL], tool_choice="required",
                                           parallel_tool_calls=False, temperature=1.0, seed=seed, max_tokens=420)
        choice = r.choices[0]
        assert choice.finish_reason == "tool_calls", choice.message
        assert len(choice.message.tool_calls) == 1
        for call in choice.message.tool_calls:
            args = json.loads(call.function.arguments)
            if call.function.name == "get_weather":
                assert set(args) == {"city", "days"}, args
            else:
                assert call.function.name == "get_time" and args["zone"] in ("utc", "cet"), call
        # Streamed, the same call (same seed, same tokens) arrives as OpenAI streams one: its id and
        # name first, then its arguments piece by piece as they are generated.
        chunks = [c for c in client.chat.completions.create(
            model="stories260K", messages=[{"role": "user", "content": "What now?"}], tools=[WEATHER_TOOL, TIME_TOOL],
            tool_choice="required", parallel_tool_calls=False, temperature=1.0, seed=seed, max_tokens=420,
            stream=True) if c.choices]
        deltas = [tc for c in chunks for tc in (c.choices[0].delta.tool_calls or [])]
        assert all(d.index == 0 for d in deltas)
        assert deltas[0].id.startswith("call_") and deltas[0].function.name == choice.message.tool_calls[0].function.name
        assert all(d.id is None and d.function.name is None for d in deltas[1:])
        assert len([d for d in deltas if d.function.arguments]) >= 3, deltas
        streamed = "".join(d.function.arguments for d in deltas)
        assert json.loads(streamed) == json.loads(choice.message.tool_calls[0].function.arguments)
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
        assert not any(c.choices[0].delta.content for c in chunks)


def test_auto_tool_choice_without_a_call_is_content(client):
    r = client.chat.completions.create(model="stories260K", messages=MESSAGES, tools=[WEATHER_TOOL],
                                       temperature=0, max_tokens=16)
    assert r.choices[0].message.tool_calls is None
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")


@pytest.mark.parametrize("body,param", [
    ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "frobnicate"}}}},
     "response_format"),
    ({"response_format": {"type": "xml"}}, "response_format"),
    ({"structured_outputs": {"regex": "([a-z"}}, "structured_outputs"),
    ({"structured_outputs": {"regex": "a", "choice": ["b"]}}, "structured_outputs"),
    ({"structured_outputs": {"grammer": "root ::= \"a\""}}, "structured_outputs"),
    ({"guided_grammar": "root ::= (\"a\""}, "guided_grammar"),
    ({"guided_choice": []}, "guided_choice"),
    ({"guided_regex": "a+", "response_format": {"type": "json_object"}}, "guided_regex"),
    ({"guided_regex": "a+", "ignore_eos": True}, "ignore_eos"),
    ({"tools": [WEATHER_TOOL], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [WEATHER_TOOL, WEATHER_TOOL]}, "tools"),
])
def test_bad_constraints_are_400_naming_the_field(server, body, param):
    payload = {"model": "stories260K", "messages": MESSAGES, "max_tokens": 4, **body}
    r = httpx.post(server.base + "/v1/chat/completions", json=payload, timeout=60)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param, r.text


def test_server_keeps_serving_after_bad_constraints(server, client):
    with pytest.raises(openai.BadRequestError):
        client.completions.create(model="stories260K", prompt="Once", max_tokens=4,
                                  extra_body={"guided_json": "{not json"})
    r = client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=8, temperature=0)
    assert r.choices[0].text
    m = server.wait_idle()
    assert m["kestrel_kv_cache_blocks_used"] == 0


def test_roles_developer_is_system_unknown_is_400_and_tool_results_render(server, client):
    def run(role):
        return client.chat.completions.create(model="stories260K", temperature=0, max_tokens=8,
                                              messages=[{"role": role, "content": "Be brief."}, *MESSAGES])
    system, developer = run("system"), run("developer")
    assert developer.usage.prompt_tokens == system.usage.prompt_tokens
    assert developer.choices[0].message.content == system.choices[0].message.content
    r = httpx.post(server.base + "/v1/chat/completions", timeout=60, json={
        "model": "stories260K", "max_tokens": 4, "messages": [{"role": "wizard", "content": "hi"}]})
    assert r.status_code == 400 and "wizard" in r.json()["error"]["message"], r.text
    r = httpx.post(server.base + "/v1/chat/completions", timeout=60, json={
        "model": "stories260K", "max_tokens": 4, "messages": [{"role": "tool", "content": "42"}]})
    assert r.status_code == 400 and "tool_call_id" in r.json()["error"]["message"], r.text
    # A whole round: the call the model made, the tool's result, then the model's answer.
    history = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 1}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    r = client.chat.completions.create(model="stories260K", messages=history, tools=[WEATHER_TOOL], temperature=0,
                                       max_tokens=8)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > run("system").usage.prompt_tokens


def test_a_grammar_dead_end_is_an_error_and_the_server_goes_on(server, client):
    r = httpx.post(server.base + "/v1/completions", timeout=60, json={
        "model": "stories260K", "prompt": "Once upon a time", "max_tokens": 20,
        "guided_grammar": "root ::= \"a\" [^\\x00-\\U0010FFFF]"})
    body = json.loads(r.text)
    assert "allows no token" in body["error"]["message"], r.text
    r = client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=8, temperature=0,
                                  extra_body={"guided_choice": ["yes", "no"]})
    assert r.choices[0].text in ("yes", "no")
    assert server.wait_idle()["kestrel_kv_cache_blocks_used"] == 0


def test_every_schema_of_the_set_gives_valid_json(client):
    """bench/data/json_schemas.json (60 schemas: nesting, $ref recursion, enums, anyOf/oneOf,
    patterns, formats, bounded arrays), one sample each at temperature 1.0, validated by the
    jsonschema package (formats checked where it can). Every output that ends is valid. Some do
    not end: the story model, sampling freely inside what the schema allows, writes numbers and
    unbounded strings (formats, free keys) until max_tokens; bench/grammar_bench measures validity
    on a real model."""
    def generate(item):
        index, entry = item
        r = client.completions.create(model="stories260K", prompt="Once upon a time", max_tokens=320,
                                      temperature=1.0, seed=100 + index, extra_body={"guided_json": entry["schema"]})
        return entry, r.choices[0]
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(generate, enumerate(SCHEMA_SET)))
    invalid, ended = [], 0
    for entry, choice in results:
        if choice.finish_reason != "stop":
            assert choice.finish_reason == "length", choice
            continue
        ended += 1
        validator = jsonschema.Draft202012Validator(entry["schema"], format_checker=jsonschema.FormatChecker())
        errors = [e.message for e in validator.iter_errors(json.loads(choice.text))]
        if errors:
            invalid.append(f"{entry['name']}: {errors[0]}: {choice.text[:200]}")
    assert len(results) == 60 and not invalid, "\n".join(invalid)
    assert ended >= 40, f"only {ended} of 60 outputs ended"
