#!/usr/bin/env python3
"""Serving benchmark: drives `kestrel serve` with N concurrent streaming clients.

For each concurrency (default 1 4 16 32 64) and each scheduler (continuous, static) it reports
output throughput, TTFT and TPOT p50/p99, and the KV memory actually held (peak blocks in use,
sampled from /metrics) against what contiguous per-sequence max-length buffers would reserve.
Then it measures TTFT for requests that share a long system prompt, with prefix caching on and
off. Prints a Markdown table; nothing is pass/fail.

    .venv/bin/python bench/serving_bench.py MODEL.gguf [--threads 2] [--concurrency 1 4 16]
"""
import argparse
import json
import random
import re
import statistics
import subprocess
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def percentile(values, p):
    if not values:
        return float("nan")
    s = sorted(values)
    k = min(len(s) - 1, max(0, int(round(p / 100.0 * (len(s) - 1)))))
    return s[k]


class Server:
    def __init__(self, binary, model, extra):
        args = [str(binary), "serve", str(model), "--host", "127.0.0.1", "--port", "0", *extra]
        self.proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
        line = ""
        for line in iter(self.proc.stderr.readline, ""):
            m = re.search(r"on http://127\.0\.0\.1:(\d+) \((\d+) KV blocks of (\d+) tokens, context (\d+)", line)
            if m:
                self.port, self.blocks, self.block_size, self.ctx = map(int, m.groups())
                break
        else:
            raise RuntimeError("server did not start: " + line)
        self.base = f"http://127.0.0.1:{self.port}"

    def metric(self, name):
        for line in httpx.get(self.base + "/metrics").text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def stream_one(base, prompt, max_tokens):
    """Returns (ttft, tpot, output_tokens) for one streaming completion."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first = last = None
    tokens = 0
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=3600) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
            if chunk["choices"] and chunk["choices"][0]["text"]:
                now = time.perf_counter()
                first = first or now
                last = now
    ttft = (first or time.perf_counter()) - start
    tpot = (last - first) / (tokens - 1) if tokens > 1 and first and last else 0.0
    return ttft, tpot, tokens


def run_level(server, concurrency, num_requests, prompt_len, max_tokens, vocab, seed):
    rng = random.Random(seed)
    prompts = [[1] + [rng.randrange(3, vocab) for _ in range(prompt_len - 1)] for _ in range(num_requests)]
    results = []
    lock = threading.Lock()
    peak_blocks = [0.0]
    done = threading.Event()

    def sampler():
        while not done.is_set():
            peak_blocks[0] = max(peak_blocks[0], server.metric("kestrel_kv_cache_blocks_used"))
            time.sleep(0.05)

    def worker(queue):
        while True:
            with lock:
                if not queue:
                    return
                p = queue.pop()
            r = stream_one(server.base, p, max_tokens)
            with lock:
                results.append(r)

    queue = list(prompts)
    threads = [threading.Thread(target=worker, args=(queue,)) for _ in range(concurrency)]
    watcher = threading.Thread(target=sampler)
    watcher.start()
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    done.set()
    watcher.join()
    ttfts = [r[0] for r in results]
    tpots = [r[1] for r in results if r[1] > 0]
    out_tokens = sum(r[2] for r in results)
    return {"throughput": out_tokens / elapsed, "ttft_p50": percentile(ttfts, 50), "ttft_p99": percentile(ttfts, 99),
            "tpot_p50": percentile(tpots, 50), "tpot_p99": percentile(tpots, 99), "peak_blocks": peak_blocks[0],
            "elapsed": elapsed}


def shared_prefix_ttft(server, system_len, num_requests, vocab, seed):
    rng = random.Random(seed)
    system = [1] + [rng.randrange(3, vocab) for _ in range(system_len - 1)]
    ttfts = []
    for i in range(num_requests):
        question = [rng.randrange(3, vocab) for _ in range(16)]
        ttfts.append(stream_one(server.base, system + question, 8)[0])
    return ttfts[1:]  # the first request fills the cache


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--kestrel", default=str(ROOT / "build" / "release" / "tools" / "kestrel"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 16, 32, 64])
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--kv-memory-mib", type=int, default=1024)
    ap.add_argument("--system-len", type=int, default=1000)
    ap.add_argument("--vocab", type=int, default=0, help="token ids to draw from (default: from /v1/models is unknown: 500)")
    args = ap.parse_args()
    vocab = args.vocab or 500

    common = ["-t", str(args.threads), "--ctx", str(args.ctx), "--kv-memory-mib", str(args.kv_memory_mib),
              "--max-num-seqs", str(max(args.concurrency)), "--max-queue", "100000"]
    rows = []
    for scheduler in ["continuous", "static"]:
        server = Server(args.kestrel, args.model, common + ["--scheduler", scheduler])
        try:
            block_bytes = None
            for c in args.concurrency:
                r = run_level(server, c, c * args.requests_per_client, args.prompt_len, args.max_tokens, vocab, c)
                r.update(scheduler=scheduler, concurrency=c, blocks=server.blocks, block_size=server.block_size,
                         ctx=server.ctx)
                rows.append(r)
                print(json.dumps(r), flush=True)
        finally:
            server.stop()

    print("\n| scheduler | clients | output tok/s | TTFT p50 / p99 (s) | TPOT p50 / p99 (ms) | peak KV blocks used | contiguous max-length reservation (blocks) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        contiguous = r["concurrency"] * r["ctx"] / r["block_size"]
        print(f"| {r['scheduler']} | {r['concurrency']} | {r['throughput']:.1f} | {r['ttft_p50']:.3f} / {r['ttft_p99']:.3f} "
              f"| {1000 * r['tpot_p50']:.1f} / {1000 * r['tpot_p99']:.1f} | {r['peak_blocks']:.0f} | {contiguous:.0f} |")

    print()
    for caching in [True, False]:
        server = Server(args.kestrel, args.model, common + ([] if caching else ["--no-prefix-caching"]))
        try:
            ttfts = shared_prefix_ttft(server, args.system_len, 9, vocab, 1)
            print(f"| shared {args.system_len}-token system prompt, prefix caching {'on' if caching else 'off'} "
                  f"| TTFT median {statistics.median(ttfts):.3f} s |", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
