#!/usr/bin/env python3
"""Records llama.cpp's greedy continuations of the default model (run by hand, never in CI).

Writes tests/data/gemma/llamacpp_greedy.json: for each prompt, llama.cpp's prompt token ids and its
greedy continuation under four attention settings (flash attention on/off x K/V cache F16/F32),
with the top-1/top-2 logit gap of each step; and llama-perplexity's figure for the first chunks of
../shared/models/text/wikitext-2-test.txt (llama-perplexity built from the llama.cpp that
llama-cpp-python 0.3.36 vendors: cmake -S vendor/llama.cpp -B build -DLLAMA_CURL=OFF). tests/e2e/gemma_test.cpp checks Kestrel against it.

Why four settings: with Q4_K_M weights the activations are quantized to 8 bits before every
matrix product, so a last-bit difference anywhere (attention summation order, F16 vs F32 K/V)
can move an activation across a rounding boundary and, at a near-tie, change the greedy token.
llama.cpp's own output changes between its settings on some prompts. A prompt is `stable` when
all four settings agree: there the continuation does not hinge on rounding, and Kestrel must
reproduce it exactly. Unstable prompts are recorded too, for the record, not asserted.

Pinned: llama-cpp-python 0.3.36 (built from source by scripts/bench_setup.sh into .venv-bench).
  .venv-bench/bin/python scripts/gen_gemma_reference.py [MODEL] [-n 32] \
      --llama-perplexity PATH/llama-perplexity [--only greedy|perplexity]
MODEL defaults to the default model (scripts/fetch_default_model.sh prints its path).
"""
import argparse
import hashlib
import json
import os
import re
import subprocess
import sys

import numpy as np
import llama_cpp
from llama_cpp import Llama

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROMPTS = [
    "Once upon a time",
    "The capital of France is",
    "def fibonacci(n):",
    "The quick brown fox",
    "Water boils at a temperature of",
    "In 1492, Columbus",
    "The three primary colors are",
    "Photosynthesis is the process by which",
    "Here is a list of fruits: apple, banana,",
    "1, 2, 3, 4, 5,",
]

GGML_TYPE_F32, GGML_TYPE_F16 = 0, 1
SETTINGS = {
    "fa_on_kv_f16": dict(flash_attn=True, type_k=GGML_TYPE_F16, type_v=GGML_TYPE_F16),
    "fa_on_kv_f32": dict(flash_attn=True, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32),
    "fa_off_kv_f16": dict(flash_attn=False, type_k=GGML_TYPE_F16, type_v=GGML_TYPE_F16),
    "fa_off_kv_f32": dict(flash_attn=False, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32),
}


def greedy(llm, ids, n):
    """Greedy continuation by argmax of the logits (no sampler chain involved)."""
    llm.reset()
    llm.eval(ids)
    out, gaps = [], []
    for _ in range(n):
        logits = np.asarray(llm.scores[llm.n_tokens - 1], dtype=np.float64)
        top2 = np.argsort(logits)[-2:]
        tok = int(top2[1])
        gaps.append(round(float(logits[top2[1]] - logits[top2[0]]), 5))
        out.append(tok)
        if tok == llm.token_eos():
            break
        llm.eval([tok])
    return out, gaps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("model", nargs="?")
    p.add_argument("-n", type=int, default=32)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--out", default=os.path.join(ROOT, "tests/data/gemma/llamacpp_greedy.json"))
    p.add_argument("--llama-perplexity", required=True, help="llama.cpp's llama-perplexity binary")
    p.add_argument("--chunks", type=int, default=4, help="wikitext chunks of 512 tokens to score")
    p.add_argument("--only", choices=["greedy", "perplexity"], help="update one part of an existing file")
    args = p.parse_args()
    model = args.model or subprocess.check_output([os.path.join(ROOT, "scripts/fetch_default_model.sh")],
                                                  text=True).strip()
    with open(model, "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()

    doc = {}
    if args.only and os.path.exists(args.out):
        with open(args.out) as f:
            doc = json.load(f)
    if args.only != "perplexity":
        doc.update(record_greedy(model, args))
    if args.only != "greedy":
        doc["perplexity"] = record_perplexity(model, args)
    doc["model_sha256"] = sha
    with open(args.out, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"wrote {args.out}", file=sys.stderr)


def record_perplexity(model, args):
    text = os.path.join(os.path.dirname(ROOT), "shared/models/text/wikitext-2-test.txt")
    out = subprocess.run([args.llama_perplexity, "-m", model, "-f", text, "-c", "512", "--chunks",
                          str(args.chunks), "-t", str(args.threads)], capture_output=True, text=True,
                         check=True)
    ppl = float(re.search(r"Final estimate: PPL = ([0-9.]+)", out.stdout + out.stderr).group(1))
    return {"text": "wikitext-2-test.txt", "n_ctx": 512, "chunks": args.chunks, "llama_cpp": ppl,
            "tool": "llama-perplexity (llama.cpp vendored by llama-cpp-python " + llama_cpp.__version__ + ")"}


def record_greedy(model, args):
    results = {name: [] for name in SETTINGS}
    prompt_ids = []
    for name, kw in SETTINGS.items():
        llm = Llama(model_path=model, n_ctx=512, n_batch=512, n_threads=args.threads,
                    n_threads_batch=args.threads, logits_all=True, verbose=False, **kw)
        for prompt in PROMPTS:
            ids = llm.tokenize(prompt.encode(), add_bos=True, special=False)
            if name == "fa_on_kv_f16":
                prompt_ids.append(ids)
            results[name].append(greedy(llm, ids, args.n))
        del llm

    cases = []
    for i, prompt in enumerate(PROMPTS):
        runs = {name: results[name][i][0] for name in SETTINGS}
        stable = all(r == runs["fa_on_kv_f16"] for r in runs.values())
        cases.append({
            "prompt": prompt,
            "prompt_ids": prompt_ids[i],
            "stable": stable,
            "greedy": runs,
            "top2_gap": results["fa_on_kv_f16"][i][1],
        })
    print(f"{sum(c['stable'] for c in cases)}/{len(cases)} prompts stable", file=sys.stderr)
    return {
        "generator": "scripts/gen_gemma_reference.py",
        "llama_cpp_python": llama_cpp.__version__,
        "n_predict": args.n,
        "reference_setting": "fa_on_kv_f16",
        "cases": cases,
    }


if __name__ == "__main__":
    main()
