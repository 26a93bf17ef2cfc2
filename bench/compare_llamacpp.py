#!/usr/bin/env python3
"""Kestrel next to llama.cpp on the same GGUF files, in the same run: figures, never pass/fail.

For each model: pp (one prompt of --pp tokens), tg (--tg tokens one at a time from an empty
cache) and batched-B (B sequences decoding together, one token each per step, --batch-tg steps
from an empty cache; total tok/s). llama.cpp runs in this process through llama-cpp-python's
low-level API (llama_decode on hand-built batches, as llama-bench and llama-batched-bench do),
with the same thread count for n_threads and n_threads_batch; Kestrel runs as
`kestrel bench --json --reps 1`. The engines alternate run by run (A B A B ...) and each run's
Kestrel/llama.cpp ratio is taken, so the reported ratio is the median of pairwise ratios: this
machine is shared and drifts by +-20% within an hour, which two separate averages would mix into
the comparison. The roofline (weight bytes per decode step / measured memory bandwidth) comes
from `kestrel bench` and applies to both engines (their files are the same bytes).

Setup: scripts/bench_setup.sh (creates .venv-bench). Example:
  .venv-bench/bin/python bench/compare_llamacpp.py ~/.cache/kestrel/models/llama-3.2-1b-F16.gguf \\
      --kestrel build/release/tools/kestrel -t 2 --runs 5
"""
import argparse
import ctypes
import json
import os
import random
import statistics
import subprocess
import sys
import time

from llama_cpp import llama_cpp as ll


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("models", nargs="+", help="GGUF files")
    p.add_argument("--kestrel", default="build/release/tools/kestrel", help="kestrel binary")
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--runs", type=int, default=3, help="alternating runs of each engine")
    p.add_argument("--pp", type=int, default=512)
    p.add_argument("--tg", type=int, default=128)
    p.add_argument("--batch", type=int, default=16, help="sequences of the batched test (0: skip)")
    p.add_argument("--batch-tg", type=int, default=32, help="decode steps of the batched test")
    p.add_argument("--verbose", action="store_true", help="show llama.cpp's log")
    return p.parse_args()


class LlamaCpp:
    """One model and context in llama.cpp, driven with llama_decode like llama-bench."""

    def __init__(self, path, threads, n_ctx, n_batch, n_seq):
        mparams = ll.llama_model_default_params()
        self.model = ll.llama_model_load_from_file(path.encode(), mparams)
        if not self.model:
            raise RuntimeError(f"llama.cpp cannot load {path}")
        cparams = ll.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = min(n_batch, 512)  # llama-bench's default micro-batch
        cparams.n_seq_max = n_seq
        cparams.n_threads = threads
        cparams.n_threads_batch = threads
        cparams.kv_unified = True  # one KV buffer shared by all sequences (llama-batched-bench -kvu)
        cparams.no_perf = True
        self.ctx = ll.llama_init_from_model(self.model, cparams)
        if not self.ctx:
            raise RuntimeError(f"llama.cpp cannot create a context of {n_ctx} tokens for {path}")
        self.n_vocab = ll.llama_vocab_n_tokens(ll.llama_model_get_vocab(self.model))
        self.batch = ll.llama_batch_init(n_batch, 0, 1)
        self.rng = random.Random(1234)

    def close(self):
        ll.llama_batch_free(self.batch)
        ll.llama_free(self.ctx)
        ll.llama_model_free(self.model)

    def _decode(self, entries):
        """entries: (token, position, sequence, wants_logits) tuples; returns seconds."""
        b = self.batch
        for i, (token, pos, seq, logits) in enumerate(entries):
            b.token[i] = token
            b.pos[i] = pos
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = seq
            b.logits[i] = 1 if logits else 0
        b.n_tokens = len(entries)
        start = time.perf_counter()
        if ll.llama_decode(self.ctx, b) != 0:
            raise RuntimeError("llama_decode failed")
        ll.llama_synchronize(self.ctx)
        return time.perf_counter() - start

    def _clear(self):
        ll.llama_memory_clear(ll.llama_get_memory(self.ctx), True)

    def _token(self):
        return self.rng.randrange(self.n_vocab)

    def prompt(self, n):
        self._clear()
        seconds = self._decode([(self._token(), i, 0, i == n - 1) for i in range(n)])
        return n / seconds

    def decode(self, num_seqs, steps):
        """Total tok/s of num_seqs sequences decoding together for `steps` steps."""
        self._clear()
        seconds = 0.0
        for step in range(steps):
            seconds += self._decode([(self._token(), step, s, True) for s in range(num_seqs)])
        return num_seqs * steps / seconds


def kestrel_bench(args, model, extra):
    command = [args.kestrel, "bench", model, "-t", str(args.threads), "--json"] + extra
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return json.loads([line for line in out.splitlines() if line.startswith("{")][-1])


def kestrel_run(args, model):
    j = kestrel_bench(args, model, ["--pp", str(args.pp), "--tg", str(args.tg), "--batch",
                                    str(args.batch), "--batch-tg", str(args.batch_tg), "--reps", "1",
                                    "--no-bandwidth"])
    result = {"pp": j["pp"]["tok_s"], "tg": j["tg"]["tok_s"]}
    if args.batch > 0:
        result["batch"] = j["batch"][0]["tok_s"]
    return result


def llama_run(args, engine):
    result = {"pp": engine.prompt(args.pp), "tg": engine.decode(1, args.tg)}
    if args.batch > 0:
        result["batch"] = engine.decode(args.batch, args.batch_tg)
    return result


def compare(args, model):
    # Bandwidth, roofline and weight types from Kestrel, once.
    info = kestrel_bench(args, model, ["--pp", "0", "--tg", "0", "--batch", "0", "--reps", "1"])
    n_ctx = max(args.pp, args.tg, args.batch * args.batch_tg) + 16
    engine = LlamaCpp(model, args.threads, n_ctx, max(args.pp, args.batch, 1), max(args.batch, 1))
    engine.decode(1, 2)  # warm-up, as kestrel bench does its own
    runs = []
    try:
        for run in range(args.runs):
            print(f"  run {run + 1}/{args.runs}: kestrel", end="", flush=True, file=sys.stderr)
            k = kestrel_run(args, model)
            print(", llama.cpp", end="", flush=True, file=sys.stderr)
            l = llama_run(args, engine)
            print(f"  | kestrel {fmt_run(k)} | llama.cpp {fmt_run(l)}", file=sys.stderr)
            runs.append((k, l))
    finally:
        engine.close()
    return info, runs


def fmt_run(r):
    return " ".join(f"{key} {value:.2f}" for key, value in r.items())


def report(args, results):
    tests = [("pp", f"pp{args.pp}", 0), ("tg", f"tg{args.tg}", 1)]
    if args.batch > 0:
        tests.append(("batch", f"batched-{args.batch} (x{args.batch_tg} steps)", args.batch))
    print(f"\nthreads: {args.threads}; {args.runs} alternating runs per engine; tok/s are medians; "
          "ratio = median of the per-run Kestrel/llama.cpp ratios; load average "
          f"{args.load_before:.1f} before, {os.getloadavg()[0]:.1f} after, on {os.cpu_count()} cores\n")
    print("| model | weights | test | Kestrel tok/s | llama.cpp tok/s | ratio | Kestrel % roofline "
          "| llama.cpp % roofline |")
    print("|---|---|---|---:|---:|---:|---:|---:|")
    for model, (info, runs) in results:
        roofline = info["roofline_tok_s"]
        for key, label, seqs in tests:
            k = statistics.median(r[0][key] for r in runs)
            l = statistics.median(r[1][key] for r in runs)
            ratio = statistics.median(r[0][key] / r[1][key] for r in runs)
            ceiling = roofline * seqs
            kp = f"{100 * k / ceiling:.0f}%" if ceiling > 0 else "-"
            lp = f"{100 * l / ceiling:.0f}%" if ceiling > 0 else "-"
            print(f"| {os.path.basename(model)} | {info['types']} | {label} | {k:.2f} | {l:.2f} | "
                  f"{ratio:.2f} | {kp} | {lp} |")
    print()
    for model, (info, _) in results:
        print(f"{os.path.basename(model)}: {info['weight_bytes_per_token'] / 2**30:.3f} GiB read per "
              f"decode step; bandwidth {info['bandwidth_bytes_s'] / 1e9:.1f} GB/s -> roofline "
              f"{info['roofline_tok_s']:.2f} tok/s per sequence (pp is compute-bound: no roofline)")


def main():
    args = parse_args()
    if not args.verbose:
        quiet = ll.llama_log_callback(lambda level, text, data: None)
        ll.llama_log_set(quiet, ctypes.c_void_p())
        main.quiet = quiet  # keep the callback alive
    ll.llama_backend_init()
    args.load_before = os.getloadavg()[0]
    if args.load_before > 0.5:
        print(f"warning: load average {args.load_before:.1f}: other work on this machine skews both "
              "engines (llama.cpp's spinning thread barriers collapse when cores are oversubscribed)",
              file=sys.stderr)
    results = []
    for model in args.models:
        print(f"{model}:", file=sys.stderr)
        results.append((model, compare(args, model)))
    report(args, results)


if __name__ == "__main__":
    main()
