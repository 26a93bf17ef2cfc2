#!/usr/bin/env python3
"""KV cache types at depth: Kestrel next to llama.cpp on the same GGUF, figures, never pass/fail.

For each KV type and depth D: decode speed (tg, --tg tokens generated after D tokens of context,
llama-bench -d D) and optionally prompt speed at that depth. Kestrel runs `kestrel bench --kv-type T
--depth D --json`, llama.cpp `llama-bench -fa 1 -ctk T -ctv T -d D -o json` (llama-bench's KV
types: f16, bf16, q8_0, q4_0; f32, fp8 and rotated q4_0 are Kestrel's only). The engines alternate (the order
flips every pair) and the ratio reported is the median of the pairwise ratios, since this shared
machine drifts by +-20% within an hour. Speed-ups between types are taken within Kestrel from the
same pairs.

  python3 bench/kv_cache_bench.py ~/.cache/kestrel/models/llama-3.2-1b-Q4_K_M.gguf \\
      --llama-bench /path/to/llama.cpp/build/bin/llama-bench --types f32 f16 q8_0 q4_0 \\
      --depths 1024 4096 16384 --runs 1
"""
import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def kestrel_tg(args, kv_type, depth):
    cmd = [args.kestrel, "bench", args.model, "-t", str(args.threads), "--pp", "0", "--tg", str(args.tg),
           "--batch", "0", "--reps", "1", "--no-bandwidth", "--depth", str(depth), "--json"]
    if kv_type == "q4_0r":
        cmd += ["--kv-type", "q4_0", "--kv-rotate"]
    else:
        cmd += ["--kv-type", kv_type]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])["tg"]["tok_s"]


def llama_tg(args, kv_type, depth):
    if kv_type not in args.llama_types or not args.llama_bench:
        return None
    cmd = [args.llama_bench, "-m", args.model, "-t", str(args.threads), "-fa", "1", "-ctk", kv_type, "-ctv", kv_type,
           "-d", str(depth), "-p", "0", "-n", str(args.tg), "-r", "1", "-o", "json"]
    try:
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=args.llama_timeout).stdout
    except subprocess.TimeoutExpired:
        print(f"llama-bench {kv_type} d{depth}: no result within {args.llama_timeout} s", file=sys.stderr)
        return None
    return json.loads(out)[0]["avg_ts"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--kestrel", default=str(ROOT / "build" / "release" / "tools" / "kestrel"))
    ap.add_argument("--llama-bench", default="", help="llama-bench binary (omit: Kestrel only)")
    ap.add_argument("--types", nargs="+", default=["f32", "f16", "bf16", "fp8", "q8_0", "q4_0", "q4_0r"])
    ap.add_argument("--depths", type=int, nargs="+", default=[1024, 4096, 16384])
    ap.add_argument("--llama-types", nargs="+", default=["f16", "bf16", "q8_0", "q4_0"],
                    help="types run on llama.cpp too (llama-bench has no f32 K/V)")
    ap.add_argument("--llama-timeout", type=float, default=None, help="seconds one llama-bench run may take")
    ap.add_argument("--tg", type=int, default=32)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=1, help="alternating pairs per (type, depth)")
    args = ap.parse_args()

    results = {}  # (type, depth) -> {"kestrel": [...], "llama": [...]}
    flip = False
    for depth in args.depths:
        for kv_type in args.types:
            r = results.setdefault((kv_type, depth), {"kestrel": [], "llama": []})
            for _ in range(args.runs):
                order = ["llama", "kestrel"] if flip else ["kestrel", "llama"]
                flip = not flip
                for engine in order:
                    v = kestrel_tg(args, kv_type, depth) if engine == "kestrel" else llama_tg(args, kv_type, depth)
                    if v is not None:
                        r[engine].append(v)
                print(json.dumps({"type": kv_type, "depth": depth, **r}), flush=True)

    print(f"\n{args.model}, {args.threads} threads, tg{args.tg} after D tokens\n")
    print("| KV type | depth | Kestrel tok/s | llama.cpp tok/s | Kestrel / llama.cpp | Kestrel vs its f16 |")
    print("|---|---:|---:|---:|---:|---:|")
    for (kv_type, depth), r in results.items():
        k = statistics.median(r["kestrel"])
        l = statistics.median(r["llama"]) if r["llama"] else None
        pairs = [a / b for a, b in zip(r["kestrel"], r["llama"])]
        ratio = f"{statistics.median(pairs):.2f}" if pairs else "-"
        f16 = results.get(("f16", depth))
        vs_f16 = f"{k / statistics.median(f16['kestrel']):.2f}" if f16 and f16["kestrel"] else "-"
        print(f"| {kv_type} | {depth} | {k:.2f} | {l:.2f} | {ratio} | {vs_f16} |" if l is not None
              else f"| {kv_type} | {depth} | {k:.2f} | - | - | {vs_f16} |")


if __name__ == "__main__":
    sys.exit(main())
