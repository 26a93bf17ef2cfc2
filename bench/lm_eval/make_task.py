#!/usr/bin/env python3
"""Builds kestrel_task's data: a 4-way next-sentence multiple-choice set from TinyStories.

Usage: python3 bench/lm_eval/make_task.py OUT_DIR [--text FILE] [--items 200] [--seed 1234]

Reads ../shared/models/text/tinystories_val.txt (the start of the TinyStories validation split;
paragraphs are separated by blank lines). Each item takes one paragraph with at least 4 sentences:
the context is its first sentences (2 to 4 of them, never the last), the right answer is the
sentence that follows, and the 3 wrong answers are sentences from 3 other paragraphs (each not the
paragraph's first sentence, so none opens with "Once upon a time"). The answer's position is
random. Everything is drawn from random.Random(seed): the same text and seed give the same file.

Writes OUT_DIR/test.jsonl: one {"id", "context", "choices": [4 strings], "label": int} per line,
the format bench/lm_eval/kestrel_task.yaml reads.
"""
import argparse
import json
import random
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_TEXT = ROOT / ".." / "shared" / "models" / "text" / "tinystories_val.txt"

# A sentence ends at . ! or ? (a closing quote may follow) before whitespace and a capital letter
# or an opening quote, outside quoted speech (an even number of '"' since the sentence began).
SENTENCE_END = re.compile(r'(?<=[.!?])("?)\s+(?=["A-Z])')


def sentences(paragraph):
    text = " ".join(paragraph.split())
    parts, start = [], 0
    for m in SENTENCE_END.finditer(text):
        if text.count('"', start, m.end(1)) % 2:
            continue
        parts.append(text[start:m.end(1)])
        start = m.end()
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--text", default=str(DEFAULT_TEXT))
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()

    paragraphs = [sentences(p) for p in Path(args.text).read_text(encoding="utf-8").split("\n\n")]
    # Short sentences ("Spot.") and very long ones make poor answers.
    ok = lambda s: 3 <= len(s.split()) <= 40
    usable = [p for p in paragraphs if len(p) >= 4 and all(ok(s) for s in p)]
    rng = random.Random(args.seed)
    if len(usable) < args.items + 3:
        raise SystemExit(f"only {len(usable)} usable paragraphs in {args.text}")
    picked = rng.sample(range(len(usable)), args.items)
    items = []
    for n, i in enumerate(picked):
        para = usable[i]
        k = rng.randint(2, min(4, len(para) - 1))  # context sentences
        context, answer = " ".join(para[:k]), para[k]
        wrong = []
        while len(wrong) < 3:
            j = rng.randrange(len(usable))
            if j == i:
                continue
            s = usable[j][rng.randrange(1, len(usable[j]))]
            if s != answer and s not in wrong and s not in para:
                wrong.append(s)
        label = rng.randrange(4)
        choices = wrong[:label] + [answer] + wrong[label:]
        items.append({"id": n, "context": context, "choices": choices, "label": label})

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "test.jsonl", "w", encoding="utf-8") as f:
        for item in items:
            f.write(json.dumps(item, ensure_ascii=False) + "\n")
    print(f"wrote {len(items)} items to {out / 'test.jsonl'} (from {len(usable)} usable paragraphs)")


if __name__ == "__main__":
    main()
