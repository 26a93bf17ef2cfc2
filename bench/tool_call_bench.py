#!/usr/bin/env python3
"""Tool-call validity on a real model through `kestrel serve` and the openai client. Figures, never
pass/fail.

Every prompt of PROMPTS is sent with all of TOOLS, under `tool_choice` "auto" and "required", at
temperature 1.0 with --samples seeds each, half of them streamed (the deltas are assembled as an
OpenAI client does). Reported per choice: replies, those cut by max_tokens (not judged further),
replies that are tool calls, calls naming an offered function, calls whose arguments parse as JSON
and validate against the function's parameters (`jsonschema` with format checks), and how streamed
calls arrived (argument deltas per call).

    .venv/bin/python bench/tool_call_bench.py ~/.cache/kestrel/models/qwen2.5-coder-0.5b-instruct.gguf
"""
import argparse
import json
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jsonschema
import openai

from serving_bench import Server  # starts `kestrel serve` on a free port, stops it

ROOT = Path(__file__).resolve().parents[1]


def fn(name, description, properties, required):
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


TOOLS = [
    fn("get_weather", "Current weather for a city.",
       {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, ["city"]),
    fn("search_flights", "Search flights between two airports on a date.",
       {"origin": {"type": "string", "pattern": "^[A-Z]{3}$"}, "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "date": {"type": "string", "format": "date"}, "passengers": {"type": "integer", "minimum": 1, "maximum": 9}},
       ["origin", "destination", "date"]),
    fn("create_event", "Create a calendar event.",
       {"title": {"type": "string", "maxLength": 80}, "start": {"type": "string", "format": "date-time"},
        "duration_minutes": {"type": "integer", "minimum": 5, "maximum": 480},
        "attendees": {"type": "array", "items": {"type": "string", "format": "email"}, "maxItems": 10}},
       ["title", "start"]),
    fn("send_email", "Send an email.",
       {"to": {"type": "string", "format": "email"}, "subject": {"type": "string", "maxLength": 120},
        "body": {"type": "string"}}, ["to", "subject", "body"]),
    fn("convert_currency", "Convert an amount between currencies.",
       {"amount": {"type": "number", "minimum": 0}, "from": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]},
        "to": {"type": "string", "enum": ["USD", "EUR", "GBP", "JPY"]}}, ["amount", "from", "to"]),
    fn("get_stock_price", "Latest price of a stock.",
       {"ticker": {"type": "string", "pattern": "^[A-Z]{1,5}$"}}, ["ticker"]),
    fn("book_restaurant", "Book a table.",
       {"restaurant": {"type": "string"}, "party_size": {"type": "integer", "minimum": 1, "maximum": 20},
        "time": {"type": "string", "pattern": "^[0-2][0-9]:[0-5][0-9]$"},
        "preferences": {"type": "object", "properties": {"outdoor": {"type": "boolean"},
                                                         "diet": {"type": "string", "enum": ["none", "vegetarian", "vegan"]}},
                        "additionalProperties": False}},
       ["restaurant", "party_size", "time"]),
    fn("run_sql", "Run a read-only SQL query.",
       {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 1000}}, ["query"]),
]

PROMPTS = [
    "What's the weather like in Lisbon right now?",
    "Is it colder in Oslo or in Helsinki today? Use Fahrenheit.",
    "Find me a flight from JFK to LHR on 2026-12-20 for two people.",
    "I need to get from SFO to NRT next Friday, 2026-12-11.",
    "Put a 45-minute meeting called 'Design review' on my calendar for 2026-12-08 at 14:00 UTC with ana@example.com.",
    "Schedule 'Dentist' tomorrow 2026-12-04T09:30:00Z.",
    "Email bob@example.com that the report is late, subject 'Report'.",
    "Send a thank-you note to the team at team@example.org.",
    "How much is 250 euros in US dollars?",
    "Convert 10000 yen to pounds.",
    "What's Apple's stock price?",
    "Check NVDA and MSFT prices for me.",
    "Book a table for 4 at Chez Panisse at 19:30, outside if possible, one vegetarian.",
    "Reserve dinner for two at Noma, 20:00.",
    "How many orders did we get last week? The table is orders(created_at).",
    "List the 10 most recent signups from the users table.",
    "What's the weather in Paris, and convert 100 USD to EUR while you're at it.",
    "Tell me a joke about databases.",
]


def ask(client, prompt, choice, seed, stream, max_tokens):
    kwargs = dict(model=client.served_model, messages=[{"role": "user", "content": prompt}], tools=TOOLS, tool_choice=choice,
                  temperature=1.0, seed=seed, max_tokens=max_tokens)
    if not stream:
        r = client.chat.completions.create(**kwargs)
        calls = [(c.function.name, c.function.arguments, None) for c in (r.choices[0].message.tool_calls or [])]
        return r.choices[0].finish_reason, calls
    calls, finish = {}, None
    for chunk in client.chat.completions.create(stream=True, **kwargs):
        if not chunk.choices:
            continue
        c = chunk.choices[0]
        finish = c.finish_reason or finish
        for d in c.delta.tool_calls or []:
            entry = calls.setdefault(d.index, {"name": None, "arguments": "", "deltas": 0})
            if d.function.name:
                entry["name"] = d.function.name
            if d.function.arguments:
                entry["arguments"] += d.function.arguments
                entry["deltas"] += 1
    return finish, [(e["name"], e["arguments"], e["deltas"]) for _, e in sorted(calls.items())]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--kestrel", default=ROOT / "build" / "release" / "tools" / "kestrel")
    ap.add_argument("--samples", type=int, default=4, help="seeds per prompt and choice (half streamed)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=384)
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()

    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    server = Server(args.kestrel, args.model, ["-t", str(args.threads)])
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{server.port}/v1", api_key="none", timeout=600)
        client.served_model = client.models.list().data[0].id
        jobs = [(p, choice, seed, seed % 2 == 1) for choice in ("auto", "required") for p in PROMPTS
                for seed in range(args.samples)]
        with ThreadPoolExecutor(args.concurrency) as pool:
            results = list(pool.map(lambda j: (j, ask(client, *j, args.max_tokens)), jobs))
    finally:
        server.stop()

    print(f"model {args.model}, {len(TOOLS)} tools, {len(PROMPTS)} prompts x {args.samples} seeds, temperature 1.0")
    print("| tool_choice | replies | cut by max_tokens | ended | with calls | finish tool_calls | calls | offered name | valid arguments | streamed calls | argument deltas per streamed call (median) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    failures = []
    for choice in ("auto", "required"):
        every = [(j, r) for j, r in results if j[1] == choice]
        rows = [(j, r) for j, r in every if r[0] != "length"]  # a reply cut short is not judged
        with_calls = sum(1 for _, (finish, calls) in rows if calls)
        finish_tc = sum(1 for _, (finish, calls) in rows if finish == "tool_calls")
        calls = [(j, c) for j, (_, cs) in rows for c in cs]
        named = sum(1 for _, (name, _, _) in calls if name in schemas)
        valid = 0
        for j, (name, arguments, _) in calls:
            try:
                jsonschema.validate(json.loads(arguments), schemas[name], format_checker=jsonschema.FormatChecker())
                valid += 1
            except Exception as e:  # noqa: BLE001 - reported below
                failures.append((choice, j[0], name, arguments, str(e).splitlines()[0]))
        streamed = sorted(d for _, (_, _, d) in calls if d is not None)
        median = streamed[len(streamed) // 2] if streamed else 0
        print(f"| {choice} | {len(every)} | {len(every) - len(rows)} | {len(rows)} | {with_calls} | {finish_tc} | {len(calls)} | {named} | {valid} | {len(streamed)} | {median} |")
    for f in failures[:10]:
        print("invalid:", f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
