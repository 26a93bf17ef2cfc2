#!/usr/bin/env python3
"""Generates the golden chat-template fixtures in tests/data/chat_templates/ with transformers.

For every <name>.jinja listed in TEMPLATES below, renders a set of conversations with transformers'
own PreTrainedTokenizerBase.apply_chat_template(..., tokenize=False) and writes
<name>.expected.json: the conversation inputs and the exact rendered text (or, when the template
raises, the error type and message). tests/unit/chat_template_test.cpp checks Kestrel's renderer
against these files byte for byte.

Run by hand (not in CI), in a virtual environment with exactly these pinned versions:

    python3 -m venv /tmp/chatvenv
    /tmp/chatvenv/bin/pip install transformers==5.24.0 jinja2==3.1.6 tokenizers==0.23.3
    /tmp/chatvenv/bin/python scripts/gen_chat_fixtures.py

No model is downloaded: the tokenizer is a one-word stand-in that only carries each model's
special tokens (bos_token / eos_token), which is all that apply_chat_template passes to a template
from the tokenizer. strftime_now() is pinned to NOW so that templates that print today's date
render reproducibly; the fixtures record it and the C++ test passes the same time.
"""

import datetime
import json
import os
import sys

import jinja2
import transformers
import transformers.utils.chat_template_utils as chat_template_utils
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

PINNED = {"transformers": "5.24.0", "jinja2": "3.1.6"}
NOW = datetime.datetime(2025, 6, 15, 12, 0, 0)
HERE = os.path.dirname(os.path.abspath(__file__))
OUT_DIR = os.path.join(HERE, "..", "tests", "data", "chat_templates")


class _FixedDatetime(datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


# transformers' strftime_now global calls chat_template_utils.datetime.now().
chat_template_utils.datetime = _FixedDatetime

# name -> (bos_token, eos_token) of the model's tokenizer (None: the tokenizer has no such token).
TEMPLATES = {
    "meta-llama-Llama-3.1-8B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "Qwen-Qwen2.5-7B-Instruct": (None, "<|im_end|>"),
    "Qwen-Qwen3-0.6B": (None, "<|im_end|>"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("<s>", "</s>"),
    "mistralai-Mistral-Small-3.2-24B-Instruct-2506": ("<s>", "</s>"),
    "google-gemma-3-4b-it": ("<bos>", "<eos>"),
    # Further templates, for wider coverage of the interpreter.
    "google-gemma-2-2b-it": ("<bos>", "<eos>"),
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "HuggingFaceTB-SmolLM3-3B": (None, "<|im_end|>"),
    "openai-gpt-oss-120b": ("<|startoftext|>", "<|return|>"),
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": ("<|begin_of_text|>", "<|im_end|>"),
    "ibm-granite-granite-3.3-2B-Instruct": (None, "<|end_of_text|>"),
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER1 = {"role": "user", "content": "What is the capital of France?"}
ASSISTANT1 = {"role": "assistant", "content": "The capital of France is Paris."}
USER2 = {"role": "user", "content": "And of Germany?"}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city"],
        },
    },
}


def case(name, messages, add_generation_prompt=True, tools=None, extra=None):
    return {"name": name, "messages": messages, "add_generation_prompt": add_generation_prompt,
            "tools": tools, "extra_context": extra or {}}


def common_cases():
    unicode_user = {"role": "user", "content": "  Héllo wörld — 日本語 🙂 \"quotes\" 'single' <b>&amp; \\n  \n\t"}
    return [
        case("system_multi_turn", [SYSTEM, USER1, ASSISTANT1, USER2]),
        case("system_multi_turn_no_generation_prompt", [SYSTEM, USER1, ASSISTANT1, USER2], False),
        case("single_user", [USER1]),
        case("no_system_multi_turn", [USER1, ASSISTANT1, USER2]),
        case("assistant_last", [USER1, ASSISTANT1], False),
        case("system_assistant_last", [SYSTEM, USER1, ASSISTANT1], False),
        case("unicode", [{"role": "system", "content": "  Réponds en français. \u00a0"}, unicode_user,
                         {"role": "assistant", "content": " naïve café 👍🏽 "},
                         {"role": "user", "content": "Ελληνικά, русский, עברית"}]),
        case("null_fields_dropped", [{"role": "user", "content": "hi", "name": None},
                                     {"role": "assistant", "content": "hello", "tool_calls": None},
                                     {"role": "user", "content": "bye"}]),
        case("two_users_in_a_row", [USER1, USER2]),
        case("assistant_first", [ASSISTANT1, USER1]),
        case("system_only", [SYSTEM]),
        case("empty_conversation", []),
        case("unknown_role", [USER1, {"role": "critic", "content": "Too short."}]),
    ]


def tool_call(name, arguments, call_id=None, arguments_as_string=False):
    call = {"type": "function", "function": {"name": name,
                                             "arguments": json.dumps(arguments) if arguments_as_string else arguments}}
    if call_id is not None:
        call["id"] = call_id
    return call


def specific_cases(name):
    weather_q = {"role": "user", "content": "What's the weather in Paris?"}
    if name.startswith("meta-llama"):
        calls = {"role": "assistant", "tool_calls": [tool_call("get_weather", {"city": "Paris"})]}
        result = {"role": "tool", "content": "{\"temperature\": 21, \"sky\": \"clear\"}"}
        out = [
            case("tools_in_user_message", [SYSTEM, weather_q], tools=[WEATHER_TOOL]),
            case("tools_in_system_message", [SYSTEM, weather_q], tools=[WEATHER_TOOL],
                 extra={"tools_in_user_message": False}),
            case("tool_call_and_result", [SYSTEM, weather_q, calls, result], tools=[WEATHER_TOOL]),
            case("tool_result_as_mapping", [weather_q, calls, {"role": "ipython", "content": {"temperature": 21}}],
                 tools=[WEATHER_TOOL], extra={"tools_in_user_message": False}),
            case("two_tool_calls_rejected", [weather_q, {"role": "assistant", "tool_calls": [
                tool_call("get_weather", {"city": "Paris"}), tool_call("get_weather", {"city": "Lyon"})]}],
                 tools=[WEATHER_TOOL]),
            case("tools_without_user_message", [SYSTEM], tools=[WEATHER_TOOL]),
            case("custom_date", [SYSTEM, USER1], extra={"date_string": "01 Jan 2025"}),
        ]
        if "3.1" in name:
            out.append(case("builtin_tools", [SYSTEM, USER1, {"role": "assistant", "tool_calls": [
                tool_call("brave_search", {"query": "weather Paris"})]}],
                            extra={"builtin_tools": ["brave_search", "wolfram_alpha", "code_interpreter"]}))
        return out
    if name.startswith("Qwen"):
        calls = {"role": "assistant", "content": "", "tool_calls": [
            tool_call("get_weather", {"city": "Paris"}), tool_call("get_weather", {"city": "Lyon", "unit": "celsius"})]}
        results = [{"role": "tool", "content": "{\"temperature\": 21}"}, {"role": "tool", "content": "{\"temperature\": 23}"}]
        out = [
            case("tools", [SYSTEM, weather_q], tools=[WEATHER_TOOL]),
            case("tools_no_system", [weather_q], tools=[WEATHER_TOOL]),
            case("parallel_tool_calls", [SYSTEM, weather_q, calls] + results, tools=[WEATHER_TOOL]),
            case("tool_call_with_text", [weather_q, {"role": "assistant", "content": "Let me check.", "tool_calls": [
                tool_call("get_weather", {"city": "Paris"})]}], False, tools=[WEATHER_TOOL]),
            case("system_in_the_middle", [USER1, ASSISTANT1, {"role": "system", "content": "Be brief."}, USER2]),
        ]
        if "Qwen3" in name:
            out += [
                case("enable_thinking_false", [SYSTEM, USER1], extra={"enable_thinking": False}),
                case("enable_thinking_true", [SYSTEM, USER1], extra={"enable_thinking": True}),
                case("reasoning_content", [USER1, {"role": "assistant", "content": "Paris.",
                                                   "reasoning_content": "The user asks about France."}], False),
                case("reasoning_in_old_turn", [USER1, {"role": "assistant", "content": "Paris.",
                                                       "reasoning_content": "Easy."}, USER2]),
                case("think_tags_in_content", [USER1, {"role": "assistant",
                                                       "content": "<think>\nFrance -> Paris.\n</think>\n\nParis."}],
                     False),
                case("thinking_alias", [USER1, {"role": "assistant", "content": "Paris.", "thinking": "Recall."}], False),
                case("multi_step_tools", [weather_q, {"role": "assistant", "content": "", "tool_calls": [
                    tool_call("get_weather", {"city": "Paris"}, arguments_as_string=True)]},
                    {"role": "tool", "content": "{\"temperature\": 21}"},
                    {"role": "assistant", "content": "<think>\nGot it.\n</think>\n\nIt is 21°C in Paris."}],
                     False, tools=[WEATHER_TOOL]),
            ]
        return out
    if name.startswith("mistralai-Mistral-Nemo"):
        calls = {"role": "assistant", "tool_calls": [dict(tool_call("get_weather", {"city": "Paris"}), id="abc123XYZ")]}
        return [
            case("tools", [SYSTEM, weather_q], tools=[WEATHER_TOOL]),
            case("tool_call_and_result", [weather_q, calls,
                                          {"role": "tool", "tool_call_id": "abc123XYZ", "content": "21 degrees"}],
                 tools=[WEATHER_TOOL]),
            case("tool_result_then_answer", [SYSTEM, weather_q, calls,
                                             {"role": "tool", "tool_call_id": "abc123XYZ", "content": {"content": 21}},
                                             {"role": "assistant", "content": "It is 21 degrees."},
                                             {"role": "user", "content": "Thanks!"}], tools=[WEATHER_TOOL]),
            case("bad_tool_call_id", [weather_q, {"role": "assistant", "tool_calls": [
                dict(tool_call("get_weather", {"city": "Paris"}), id="short")]}], tools=[WEATHER_TOOL]),
        ]
    if name.startswith("mistralai-Mistral-Small"):
        return [
            case("content_blocks", [{"role": "system", "content": [{"type": "text", "text": "Describe images."}]},
                                    {"role": "user", "content": [{"type": "image"},
                                                                 {"type": "text", "text": "What is this?"}]},
                                    {"role": "assistant", "content": [{"type": "text", "text": "A cat."}]}], False),
            case("tools", [weather_q], tools=[WEATHER_TOOL]),
            case("tool_call_and_result", [weather_q, {"role": "assistant", "tool_calls": [
                dict(tool_call("get_weather", {"city": "Paris"}), id="abc123XYZ")]},
                {"role": "tool", "tool_call_id": "abc123XYZ", "content": "21 degrees"}], tools=[WEATHER_TOOL]),
            case("bad_content_block", [{"role": "user", "content": [{"type": "audio"}]}]),
        ]
    if name.startswith("google-gemma-3"):
        return [
            case("content_blocks", [{"role": "system", "content": [{"type": "text", "text": " Look closely. "}]},
                                    {"role": "user", "content": [{"type": "image"},
                                                                 {"type": "text", "text": " What is this? "}]}]),
            case("numeric_content", [{"role": "user", "content": 42}]),
        ]
    if name.startswith(("HuggingFaceTB", "openai", "NousResearch", "ibm-granite", "deepseek")):
        calls = {"role": "assistant", "content": "", "tool_calls": [tool_call("get_weather", {"city": "Paris"},
                                                                              call_id="call_1")]}
        out = [
            case("tools", [SYSTEM, weather_q], tools=[WEATHER_TOOL]),
            case("tool_call_and_result", [SYSTEM, weather_q, calls,
                                          {"role": "tool", "tool_call_id": "call_1", "name": "get_weather",
                                           "content": "{\"temperature\": 21}"}], tools=[WEATHER_TOOL]),
            case("reasoning", [USER1, {"role": "assistant", "content": "Paris.", "reasoning_content": "Easy one."},
                               USER2]),
        ]
        if name.startswith("HuggingFaceTB"):
            out.append(case("enable_thinking_false", [SYSTEM, USER1], extra={"enable_thinking": False}))
        if name.startswith("openai"):
            out.append(case("reasoning_effort_high", [SYSTEM, USER1], extra={"reasoning_effort": "high"}))
        if name.startswith("ibm-granite"):
            out.append(case("documents", [USER1], extra={"thinking": True}))
        return out
    return []


def make_tokenizer(bos, eos):
    special = {}
    if bos is not None:
        special["bos_token"] = bos
    if eos is not None:
        special["eos_token"] = eos
    backend = Tokenizer(models.WordLevel(vocab={"[UNK]": 0}, unk_token="[UNK]"))
    return PreTrainedTokenizerFast(tokenizer_object=backend, **special)


def render(tokenizer, template, c):
    try:
        text = tokenizer.apply_chat_template(
            c["messages"], chat_template=template, tokenize=False, add_generation_prompt=c["add_generation_prompt"],
            tools=c["tools"], **c["extra_context"])
        return {"expected": text}
    except Exception as e:  # the template raised: record what transformers reports
        return {"error_type": type(e).__name__, "error": str(e)}


def main():
    versions = {"transformers": transformers.__version__, "jinja2": jinja2.__version__}
    if versions != PINNED:
        sys.exit(f"expected {PINNED}, found {versions}: install the pinned versions (see the docstring)")
    for name, (bos, eos) in TEMPLATES.items():
        with open(os.path.join(OUT_DIR, name + ".jinja"), encoding="utf-8") as f:
            template = f.read()
        tokenizer = make_tokenizer(bos, eos)
        cases = []
        for c in common_cases() + specific_cases(name):
            cases.append({**c, **render(tokenizer, template, c)})
        fixture = {"template": name + ".jinja", "generated_with": versions, "bos_token": bos, "eos_token": eos,
                   "now": NOW.strftime("%Y-%m-%dT%H:%M:%S"), "cases": cases}
        path = os.path.join(OUT_DIR, name + ".expected.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(fixture, f, ensure_ascii=False, indent=1)
            f.write("\n")
        errors = sum("error" in c for c in cases)
        print(f"{path}: {len(cases)} cases ({errors} raise)")


if __name__ == "__main__":
    main()
