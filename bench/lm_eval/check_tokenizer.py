#!/usr/bin/env python3
"""Checks that a Hugging Face tokenizer folder gives the same ids as a running `kestrel serve`.

Usage (in the lm-eval venv): python bench/lm_eval/check_tokenizer.py TOKENIZER_DIR BASE_URL [--lines N]
    e.g. ... /work/lmeval-work/tokenizer-qwen2.5-coder-0.5b http://127.0.0.1:8080

Encodes N lines (default 300 from each of ../shared/models/text/tinystories_val.txt and
wikitext-2-test.txt, blank lines skipped, plus the task's own strings when --task-jsonl is given)
with the HF tokenizer (add_special_tokens=False, as lm-eval's local-completions does) and with
POST /tokenize {"content", "add_special": false}, and reports every line where the ids differ
(first 5 shown, with the first differing position). Exits 1 on any difference.
"""
import argparse
import json
import os
import sys
import urllib.request
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from transformers import AutoTokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TEXT = ROOT / ".." / "shared" / "models" / "text"


def server_ids(base, text):
    req = urllib.request.Request(base.rstrip("/") + "/tokenize",
                                 data=json.dumps({"content": text, "add_special": False}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.load(r)["tokens"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tokenizer")
    ap.add_argument("base_url")
    ap.add_argument("--lines", type=int, default=300)
    ap.add_argument("--task-jsonl", help="also check the task's contexts and 'context + choice' strings")
    args = ap.parse_args()

    tok = AutoTokenizer.from_pretrained(args.tokenizer)
    texts = []
    for name in ("tinystories_val.txt", "wikitext-2-test.txt"):
        lines = [l for l in (TEXT / name).read_text(encoding="utf-8").splitlines() if l.strip()]
        texts += lines[:args.lines]
    if args.task_jsonl:
        for line in open(args.task_jsonl, encoding="utf-8"):
            d = json.loads(line)
            texts.append(d["context"])
            texts += [d["context"] + " " + c for c in d["choices"]]
    bad = []
    n_tokens = 0
    for t in texts:
        hf = tok(t, add_special_tokens=False)["input_ids"]
        srv = server_ids(args.base_url, t)
        n_tokens += len(srv)
        if hf != srv:
            pos = next((i for i, (a, b) in enumerate(zip(hf, srv)) if a != b), min(len(hf), len(srv)))
            bad.append((t, pos, hf[pos:pos + 5], srv[pos:pos + 5]))
    print(f"{len(texts)} strings, {n_tokens} server tokens: {len(texts) - len(bad)} identical, {len(bad)} differ")
    for t, pos, hf, srv in bad[:5]:
        print(f"  at token {pos}: hf {hf} server {srv} in {t[:120]!r}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
