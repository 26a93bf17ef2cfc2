"""Validates grammar_bench's outputs against their schemas with the jsonschema package.
   .venv/bin/python bench/validate_json_outputs.py grammar_bench_outputs.jsonl [bench/data/json_schemas.json]
Prints how many outputs ended (stop token), how many of those are valid, and every invalid one."""
import json
import sys
from collections import Counter

import jsonschema


def main():
    outputs_path = sys.argv[1]
    schemas_path = sys.argv[2] if len(sys.argv) > 2 else "bench/data/json_schemas.json"
    schemas = {s["name"]: s["schema"] for s in json.load(open(schemas_path))}
    finish, valid, invalid = Counter(), 0, []
    for line in open(outputs_path):
        out = json.loads(line)
        finish[out["finish"]] += 1
        if out["finish"] != "stop":
            continue
        validator = jsonschema.Draft202012Validator(schemas[out["schema"]], format_checker=jsonschema.FormatChecker())
        try:
            errors = [e.message for e in validator.iter_errors(json.loads(out["text"]))]
        except json.JSONDecodeError as e:
            errors = [f"not JSON: {e}"]
        if errors:
            invalid.append((out["schema"], errors[0], out["text"][:300]))
        else:
            valid += 1
    ended = finish["stop"]
    print(f"outputs: {sum(finish.values())} ({dict(finish)}); ended: {ended}; valid: {valid} of {ended}"
          f" ({100.0 * valid / max(1, ended):.1f}%)")
    for name, error, text in invalid:
        print(f"INVALID {name}: {error}\n  {text}")


if __name__ == "__main__":
    main()
