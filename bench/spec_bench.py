#!/usr/bin/env python3
"""Speculative decoding, side by side: Kestrel (`kestrel run`, plain and speculating) and llama.cpp
(`llama-server`, plain and with -md DRAFT at each --spec-draft-n-max) on the same prompts, greedy.

Every round runs every configuration once on every prompt (so drift hits all alike); figures are
medians over rounds of the generation rate (prefill excluded, as both engines report it), and
speed-ups are medians of pairwise ratios within a round. Kestrel's acceptance comes from its
`speculative (...)` line, llama.cpp's from the response's timings (draft_n, draft_n_accepted).

  bench/spec_bench.py TARGET --draft DRAFT [--workload code|edit|quote] [--rounds 3] [--n-predict 256]
      [--kestrel-spec draft ngram] [--llama-draft-max 4 8 16] [--llama-bin DIR] [--no-llama]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CODE_TASKS = [
    "Write a Python function that parses a CSV file and returns a list of dictionaries, converting integer and float fields. Include docstrings.",
    "Write a C function that reverses a singly linked list in place, with a small test in main().",
    "Write a Python class implementing an LRU cache with get and put in O(1), with type hints.",
    "Write a JavaScript function that debounces another function, with JSDoc comments.",
]


def chat(text):
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def edit_prompts():
    """Input-grounded: rewrite a given ~200-line source file (the output mostly copies it)."""
    out = []
    for rel, change in [("src/sched/scheduler.cpp", "rename the variable `budget` to `token_budget`"),
                        ("src/kv/kv_cache_manager.cpp", "rename the parameter `request` to `request_id`")]:
        source = (ROOT / rel).read_text()
        out.append(chat(f"Here is a C++ source file:\n```cpp\n{source}```\nRewrite the whole file and {change}; "
                        "change nothing else. Output only the code."))
    return out


def quote_prompts():
    """Input-grounded: answer with quotes from a given document (wikitext-2)."""
    text = (ROOT / ".." / "shared" / "models" / "text").resolve()
    doc = ""
    for f in sorted(text.rglob("*")):
        if f.is_file() and "wiki" in f.name.lower():
            doc = f.read_text(errors="ignore")
            break
    paragraphs = [p.strip() for p in doc.split("\n") if len(p.strip()) > 400][:6]
    document = "\n\n".join(paragraphs)
    return [chat(f"Document:\n{document}\n\nQuote, word for word, the paragraph of the document that begins with "
                 f"\"{p[:60]}\", then the one after it.") for p in paragraphs[:2]]


def run_kestrel(binary, target, prompt, n_predict, extra, threads):
    cmd = [binary, "run", target, "-p", prompt, "-n", str(n_predict), "--temp", "0", "-t", str(threads)] + extra
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed: {proc.stderr[-2000:]}")
    m = re.search(r"generation: (\d+) tokens, ([\d.]+) tok/s", proc.stderr)
    rate = float(m.group(2))
    acc = re.search(r"(\d+) drafts verified, (\d+) accepted", proc.stderr)
    drafted, accepted = (int(acc.group(1)), int(acc.group(2))) if acc else (0, 0)
    return rate, drafted, accepted, proc.stdout


class LlamaServer:
    def __init__(self, bin_dir, target, port, threads, ctx, draft=None, draft_max=None):
        args = [str(Path(bin_dir) / "llama-server"), "-m", target, "--port", str(port), "-t", str(threads),
                "-c", str(ctx), "--no-webui", "-np", "1"]
        if draft:
            args += ["-md", draft, "--spec-draft-n-max", str(draft_max), "-td", str(threads)]
        env = dict(os.environ, LD_LIBRARY_PATH=str(bin_dir))
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 300
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.base + "/health", timeout=5) as r:
                    if json.loads(r.read()).get("status") == "ok":
                        return
            except Exception:
                time.sleep(0.5)
        raise RuntimeError("llama-server did not start")

    def complete(self, prompt, n_predict):
        body = json.dumps({"prompt": prompt, "n_predict": n_predict, "temperature": 0, "cache_prompt": False,
                           "samplers": ["top_k"], "top_k": 1}).encode()
        req = urllib.request.Request(self.base + "/completion", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=1800) as r:
            out = json.loads(r.read())
        t = out.get("timings", {})
        return t.get("predicted_per_second", 0.0), t.get("draft_n", 0), t.get("draft_n_accepted", 0), out.get("content", "")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("target")
    ap.add_argument("--draft")
    ap.add_argument("--workload", choices=["code", "edit", "quote"], default="code")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n-predict", type=int, default=256)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--kestrel", default=str(ROOT / "build" / "release" / "tools" / "kestrel"))
    ap.add_argument("--kestrel-spec", nargs="+", default=["draft"], help="draft, ngram, draft-fixed, ngram-fixed, draft-allvocab, draft-fixed-allvocab")
    ap.add_argument("--spec-tokens", type=int, default=None)
    ap.add_argument("--llama-bin", default=str(ROOT.parent / "peer" / "llama_cpp_python-0.3.36" / "vendor" / "llama.cpp" / "build" / "bin"))
    ap.add_argument("--llama-draft-max", type=int, nargs="*", default=[4, 8, 16])
    ap.add_argument("--no-llama", action="store_true")
    args = ap.parse_args()

    prompts = {"code": [chat(t) for t in CODE_TASKS], "edit": edit_prompts(), "quote": quote_prompts()}[args.workload]
    configs = [("kestrel plain", [])]
    for s in args.kestrel_spec:
        method, _, mode = s.partition("-")
        extra = ["--draft-model", args.draft] if method == "draft" else ["--spec", "ngram"]
        if "fixed" in mode.split("-"):
            extra.append("--spec-fixed")
        if "allvocab" in mode.split("-"):
            extra += ["--draft-vocab", "0"]  # the draft's whole head (default: its 32k most frequent tokens)
        if args.spec_tokens:
            extra += ["--spec-tokens", str(args.spec_tokens)]
        configs.append((f"kestrel {s}", extra))
    servers = {}
    if not args.no_llama:
        ctx = 8192
        servers["llama plain"] = LlamaServer(args.llama_bin, args.target, 18480, args.threads, ctx)
        if args.draft:
            for i, k in enumerate(args.llama_draft_max):
                servers[f"llama -md n_max={k}"] = LlamaServer(args.llama_bin, args.target, 18481 + i, args.threads, ctx,
                                                              args.draft, k)
    names = [c[0] for c in configs] + list(servers)
    rates = {n: [] for n in names}          # per round: mean over prompts
    acceptance = {n: [0, 0] for n in names}
    outputs = {}
    try:
        for rnd in range(args.rounds):
            for name, extra in configs:
                per = []
                for i, p in enumerate(prompts):
                    rate, drafted, accepted, text = run_kestrel(args.kestrel, args.target, p, args.n_predict, extra, args.threads)
                    per.append(rate)
                    acceptance[name][0] += drafted
                    acceptance[name][1] += accepted
                    outputs.setdefault((name, i), text)
                rates[name].append(statistics.mean(per))
                print(f"round {rnd + 1}: {name}: {rates[name][-1]:.2f} tok/s", file=sys.stderr, flush=True)
            for name, server in servers.items():
                per = []
                for i, p in enumerate(prompts):
                    rate, drafted, accepted, text = server.complete(p, args.n_predict)
                    per.append(rate)
                    acceptance[name][0] += drafted
                    acceptance[name][1] += accepted
                rates[name].append(statistics.mean(per))
                print(f"round {rnd + 1}: {name}: {rates[name][-1]:.2f} tok/s", file=sys.stderr, flush=True)
    finally:
        for s in servers.values():
            s.stop()

    for (name, i), text in outputs.items():
        if name != "kestrel plain" and text != outputs[("kestrel plain", i)]:
            print(f"WARNING: {name} output differs from plain on prompt {i}", file=sys.stderr)
    plain = rates["kestrel plain"]
    best_llama = None
    llama_spec = [n for n in servers if n != "llama plain"]
    print(f"| engine / config | tok/s (median of {args.rounds}) | acceptance | vs Kestrel plain | vs llama plain |")
    print("|---|---:|---:|---:|---:|")
    for name in names:
        r = rates[name]
        drafted, accepted = acceptance[name]
        acc = f"{100.0 * accepted / drafted:.1f}%" if drafted else "-"
        vs_plain = statistics.median(a / b for a, b in zip(r, plain))
        vs_llama = statistics.median(a / b for a, b in zip(r, rates["llama plain"])) if "llama plain" in rates else float("nan")
        print(f"| {name} | {statistics.median(r):.2f} | {acc} | {vs_plain:.2f}x | {vs_llama:.2f}x |")
    if llama_spec:
        best_llama = max(llama_spec, key=lambda n: statistics.median(rates[n]))
        for name, _ in configs[1:]:
            ratio = statistics.median(a / b for a, b in zip(rates[name], rates[best_llama]))
            print(f"{name} vs {best_llama} (llama.cpp's best): {ratio:.2f}x")


if __name__ == "__main__":
    main()
