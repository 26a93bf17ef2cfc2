#!/usr/bin/env python3
"""Serving benchmark: drives `kestrel serve` with streaming clients. Figures, never pass/fail.

Workloads (--workload):
  sharegpt  open loop, as the vLLM paper measured: requests arrive as a Poisson process at --rate
            requests/s (0: all at once), each with a prompt and an output length drawn from
            long-tailed distributions like ShareGPT's (below; the dataset itself is not reachable
            offline, so the generator and its parameters are committed here), EOS ignored so every
            request produces exactly its drawn output length;
  fixed     closed loop: --concurrency clients, each sending --requests-per-client requests of
            --prompt-len tokens and --max-tokens output tokens one after another.

For every scheduler (--schedulers continuous static) and KV type (--kv-types) it starts a server
and reports output throughput, goodput (requests/s and output tok/s of requests that met both
--slo-ttft and --slo-tpot), TTFT and TPOT p50/p99, preemptions and the peak KV blocks held (from
/metrics). Then, unless --no-prefix-test, TTFT for requests sharing a long system prompt with
prefix caching on and off. Prints Markdown tables.

The ShareGPT-like lengths: the vLLM paper (Kwon et al., SOSP 2023, section 6.1) gives ShareGPT's
mean input length as 161.31 tokens and mean output length as 337.99 tokens, both long-tailed.
We draw each from a log-normal with that mean (sigma 1.2 for inputs, 0.9 for outputs, which puts
the medians at 79 and 226 tokens and leaves a tail past 1,000), clipped to [4, --max-prompt] and
[1, --max-output]. Token ids are uniform over the vocabulary (lengths, not content, drive the
scheduler and the KV cache).

    .venv/bin/python bench/serving_bench.py MODEL.gguf --workload sharegpt --rate 2 --num-requests 200
    .venv/bin/python bench/serving_bench.py MODEL.gguf --workload fixed --concurrency 64 \\
        --prompt-len 1024 --max-tokens 1024 --kv-types f16 q8_0 --kv-memory-mib 256 --schedulers continuous
"""
import argparse
import json
import math
import random
import re
import statistics
import subprocess
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]

SHAREGPT_INPUT_MEAN, SHAREGPT_INPUT_SIGMA = 161.31, 1.2
SHAREGPT_OUTPUT_MEAN, SHAREGPT_OUTPUT_SIGMA = 337.99, 0.9


def lognormal_with_mean(rng, mean, sigma):
    # mean = exp(mu + sigma^2 / 2)
    return rng.lognormvariate(math.log(mean) - sigma * sigma / 2, sigma)


def sharegpt_requests(n, rng, max_prompt, max_output, vocab):
    reqs = []
    for _ in range(n):
        p = int(min(max_prompt, max(4, round(lognormal_with_mean(rng, SHAREGPT_INPUT_MEAN, SHAREGPT_INPUT_SIGMA)))))
        o = int(min(max_output, max(1, round(lognormal_with_mean(rng, SHAREGPT_OUTPUT_MEAN, SHAREGPT_OUTPUT_SIGMA)))))
        reqs.append(([1] + [rng.randrange(3, vocab) for _ in range(p - 1)], o))
    return reqs


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
        self.port = None
        lines = []
        for line in iter(self.proc.stderr.readline, ""):
            lines.append(line)
            m = re.search(r"on http://127\.0\.0\.1:(\d+) \(context (\d+)", line)
            if m:
                self.port, self.ctx = int(m.group(1)), int(m.group(2))
            m = re.search(r"KV cache: (.*?), ([\d.]+ \S+) per token, (\d+) tokens \((\d+) blocks of (\d+)\)", line)
            if m:
                self.kv_type, self.kv_per_token = m.group(1), m.group(2)
                self.kv_tokens, self.blocks, self.block_size = int(m.group(3)), int(m.group(4)), int(m.group(5))
                break
        if self.port is None or not hasattr(self, "blocks"):
            raise RuntimeError("server did not start: " + "".join(lines))
        self.base = f"http://127.0.0.1:{self.port}"
        # Keep reading stderr so the server never blocks on a full pipe.
        threading.Thread(target=lambda: [None for _ in iter(self.proc.stderr.readline, "")], daemon=True).start()

    def metric(self, name):
        for line in httpx.get(self.base + "/metrics").text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        return 0.0

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def stream_one(base, prompt, max_tokens):
    """Returns (ttft, tpot, output_tokens, e2e) for one streaming completion."""
    body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
            "stream": True, "stream_options": {"include_usage": True}}
    start = time.perf_counter()
    first = last = None
    tokens = 0
    with httpx.stream("POST", base + "/v1/completions", json=body, timeout=7200) as r:
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
    end = time.perf_counter()
    ttft = (first or end) - start
    tpot = (last - first) / (tokens - 1) if tokens > 1 and first and last else 0.0
    return ttft, tpot, tokens, end - start


class PeakBlocks:
    """Samples kestrel_kv_cache_blocks_used while a run lasts."""

    def __init__(self, server):
        self.server, self.peak, self.done = server, 0.0, threading.Event()
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self):
        while not self.done.is_set():
            try:
                self.peak = max(self.peak, self.server.metric("kestrel_kv_cache_blocks_used"))
            except httpx.HTTPError:
                pass
            time.sleep(0.1)

    def stop(self):
        self.done.set()
        self.thread.join()
        return self.peak


def run_open_loop(server, requests, rate, seed):
    """Poisson arrivals at `rate` req/s (0: all at once); one thread per request."""
    rng = random.Random(seed)
    results, lock, threads = [], threading.Lock(), []
    start = time.perf_counter()
    at = 0.0
    for prompt, out_len in requests:
        if rate > 0:
            at += rng.expovariate(rate)
            time.sleep(max(0.0, start + at - time.perf_counter()))

        def one(p=prompt, o=out_len):
            r = stream_one(server.base, p, o)
            with lock:
                results.append(r)
        t = threading.Thread(target=one)
        t.start()
        threads.append(t)
    for t in threads:
        t.join()
    return results, time.perf_counter() - start


def run_closed_loop(server, concurrency, per_client, prompt_len, max_tokens, vocab, seed):
    rng = random.Random(seed)
    queue = [([1] + [rng.randrange(3, vocab) for _ in range(prompt_len - 1)], max_tokens)
             for _ in range(concurrency * per_client)]
    results, lock = [], threading.Lock()

    def worker():
        while True:
            with lock:
                if not queue:
                    return
                p, o = queue.pop()
            r = stream_one(server.base, p, o)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, time.perf_counter() - start


def summarize(results, elapsed, slo_ttft, slo_tpot):
    ttfts = [r[0] for r in results]
    tpots = [r[1] for r in results if r[1] > 0]
    out_tokens = sum(r[2] for r in results)
    good = [r for r in results if r[0] <= slo_ttft and r[1] <= slo_tpot]
    return {"requests": len(results), "throughput": out_tokens / elapsed, "req_s": len(results) / elapsed,
            "goodput_req_s": len(good) / elapsed, "goodput_tok_s": sum(r[2] for r in good) / elapsed,
            "ttft_p50": percentile(ttfts, 50), "ttft_p99": percentile(ttfts, 99),
            "tpot_p50": percentile(tpots, 50), "tpot_p99": percentile(tpots, 99), "elapsed": elapsed}


def shared_prefix_ttft(server, system_len, num_requests, vocab, seed):
    rng = random.Random(seed)
    system = [1] + [rng.randrange(3, vocab) for _ in range(system_len - 1)]
    ttfts = []
    for _ in range(num_requests):
        question = [rng.randrange(3, vocab) for _ in range(16)]
        ttfts.append(stream_one(server.base, system + question, 8)[0])
    return ttfts[1:]  # the first request fills the cache


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--kestrel", default=str(ROOT / "build" / "release" / "tools" / "kestrel"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workload", choices=["sharegpt", "fixed"], default="sharegpt")
    ap.add_argument("--rate", type=float, default=2.0, help="sharegpt: Poisson arrivals, requests/s (0: all at once)")
    ap.add_argument("--num-requests", type=int, default=200, help="sharegpt: requests")
    ap.add_argument("--max-prompt", type=int, default=1024)
    ap.add_argument("--max-output", type=int, default=1024)
    ap.add_argument("--concurrency", type=int, nargs="+", default=[16, 64], help="fixed: clients")
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--schedulers", nargs="+", default=["continuous", "static"])
    ap.add_argument("--kv-types", nargs="+", default=["f16"])
    ap.add_argument("--ctx", type=int, default=2048)
    ap.add_argument("--kv-memory-mib", type=int, default=1024)
    ap.add_argument("--max-num-seqs", type=int, default=64)
    ap.add_argument("--slo-ttft", type=float, default=10.0, help="goodput: seconds to the first token")
    ap.add_argument("--slo-tpot", type=float, default=0.5, help="goodput: seconds per output token")
    ap.add_argument("--system-len", type=int, default=1000)
    ap.add_argument("--no-prefix-test", action="store_true")
    ap.add_argument("--vocab", type=int, default=500, help="token ids to draw from")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--server-configs", nargs="+", default=[""],
                    help="extra `kestrel serve` arguments per configuration, e.g. '' '--spec ngram' "
                         "'--draft-model D' (each is run with every KV type and scheduler)")
    args = ap.parse_args()

    common = ["-t", str(args.threads), "--ctx", str(args.ctx), "--kv-memory-mib", str(args.kv_memory_mib),
              "--max-num-seqs", str(args.max_num_seqs), "--max-queue", "100000"]
    rows = []
    for kv_type, scheduler, config in [(k, s, c) for c in args.server_configs for k in args.kv_types
                                       for s in args.schedulers]:
        server = Server(args.kestrel, args.model, common + ["--scheduler", scheduler, "--kv-type", kv_type] + config.split())
        try:
            levels = [None] if args.workload == "sharegpt" else args.concurrency
            for c in levels:
                peak = PeakBlocks(server)
                preempt_before = server.metric("kestrel_num_preemptions_total")
                if args.workload == "sharegpt":
                    reqs = sharegpt_requests(args.num_requests, random.Random(args.seed), args.max_prompt,
                                             args.max_output, args.vocab)
                    results, elapsed = run_open_loop(server, reqs, args.rate, args.seed)
                else:
                    results, elapsed = run_closed_loop(server, c, args.requests_per_client, args.prompt_len,
                                                       args.max_tokens, args.vocab, c)
                r = summarize(results, elapsed, args.slo_ttft, args.slo_tpot)
                r.update(kv_type=kv_type + (f" {config}" if config else ""), scheduler=scheduler, clients=c if c else f"{args.rate}/s",
                         peak_blocks=peak.stop(), blocks=server.blocks, kv_tokens=server.kv_tokens,
                         kv_per_token=server.kv_per_token,
                         preemptions=server.metric("kestrel_num_preemptions_total") - preempt_before)
                rows.append(r)
                print(json.dumps(r), flush=True)
        finally:
            server.stop()

    print(f"\n{args.workload} workload; goodput: TTFT <= {args.slo_ttft} s and TPOT <= {1000 * args.slo_tpot:.0f} ms\n")
    print("| KV type | scheduler | clients / rate | requests | output tok/s | goodput req/s (tok/s) | TTFT p50 / p99 (s) "
          "| TPOT p50 / p99 (ms) | preemptions | peak KV blocks / pool (tokens held) |")
    print("|---|---|---|---:|---:|---:|---|---|---:|---|")
    for r in rows:
        print(f"| {r['kv_type']} | {r['scheduler']} | {r['clients']} | {r['requests']} | {r['throughput']:.1f} "
              f"| {r['goodput_req_s']:.2f} ({r['goodput_tok_s']:.1f}) | {r['ttft_p50']:.2f} / {r['ttft_p99']:.2f} "
              f"| {1000 * r['tpot_p50']:.0f} / {1000 * r['tpot_p99']:.0f} | {r['preemptions']:.0f} "
              f"| {r['peak_blocks']:.0f} / {r['blocks']} ({r['kv_tokens']} tokens, {r['kv_per_token']} per token) |")

    if args.no_prefix_test:
        return
    print()
    for caching in [True, False]:
        server = Server(args.kestrel, args.model, common + ([] if caching else ["--no-prefix-caching"]))
        try:
            ttfts = shared_prefix_ttft(server, args.system_len, 9, args.vocab, 1)
            print(f"| shared {args.system_len}-token system prompt, prefix caching {'on' if caching else 'off'} "
                  f"| TTFT median {statistics.median(ttfts):.3f} s |", flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
