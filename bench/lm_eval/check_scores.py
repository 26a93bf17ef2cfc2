#!/usr/bin/env python3
"""Recomputes some of lm-eval's loglikelihoods with direct scoring requests to `kestrel serve`.

Usage: python3 bench/lm_eval/check_scores.py SAMPLES.jsonl BASE_URL MODEL_NAME [--items 5]
    SAMPLES.jsonl: lm-eval's --log_samples file (WORK/results/NAME/samples_kestrel_task_*.jsonl)

lm-eval sent token ids (context + continuation, max_tokens 1) and summed token_logprobs[ctxlen:-1].
Here each (context, " " + choice) is sent the other way: as one text prompt with max_tokens 0,
echo and logprobs 1, and the continuation is every token whose text_offset (characters) is at or
past the context's length. Prints both sums per choice and the largest difference; exits 1 if one
exceeds --tol (default 1e-3 nats).
"""
import argparse
import json
import sys
import urllib.request


def post(base, path, body):
    req = urllib.request.Request(base.rstrip("/") + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("samples")
    ap.add_argument("base_url")
    ap.add_argument("model")
    ap.add_argument("--items", type=int, default=5)
    ap.add_argument("--tol", type=float, default=1e-3)
    args = ap.parse_args()

    worst = 0.0
    for line in list(open(args.samples, encoding="utf-8"))[:args.items]:
        s = json.loads(line)
        doc = s["doc"]
        print(f"item {s['doc_id']} (label {doc['label']}): {doc['context'][:70]!r}...")
        for i, (choice, resp) in enumerate(zip(doc["choices"], s["resps"])):
            lm_eval_ll = float(resp[0][0])
            prompt = doc["context"] + " " + choice
            out = post(args.base_url, "/v1/completions",
                       {"model": args.model, "prompt": prompt, "max_tokens": 0, "echo": True,
                        "logprobs": 1, "temperature": 0})
            lp = out["choices"][0]["logprobs"]
            cont = [v for off, v in zip(lp["text_offset"], lp["token_logprobs"]) if off >= len(doc["context"])]
            direct = sum(cont)
            worst = max(worst, abs(direct - lm_eval_ll))
            mark = "*" if i == doc["label"] else " "
            print(f"  {mark}{i}: lm-eval {lm_eval_ll:10.4f}  direct {direct:10.4f}  ({len(cont)} tokens) {choice[:50]!r}")
    print(f"largest difference: {worst:.2e} nats")
    sys.exit(1 if worst > args.tol else 0)


if __name__ == "__main__":
    main()
