#!/usr/bin/env python3
"""Legitimate throughput and /health latency of `kestrel serve` while hostile clients attack it.

Rounds alternate a quiet run and an attacked run (slowloris: connections that each send one header
line per second; partial heads: connections that send half a request line and stop). Each run sends
`--requests` completions from `--clients` concurrent clients and probes /health every 100 ms.
Prints per-round figures, then the median of the pairwise ratios attacked/quiet.

  bench/server_attack_bench.py --kestrel build/release/tools/kestrel --model MODEL [--rounds 3]
"""
import argparse
import concurrent.futures as futures
import re
import signal
import socket
import statistics
import subprocess
import threading
import time

import httpx


def start_server(args):
    proc = subprocess.Popen([args.kestrel, "serve", args.model, "--host", "127.0.0.1", "--port", "0",
                             "-t", str(args.threads), "--max-num-seqs", str(args.clients)],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        line = proc.stderr.readline()
        m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
        if m:
            return proc, int(m.group(1))
        if not line and proc.poll() is not None:
            break
    raise SystemExit("the server did not start")


class Attack:
    """Hostile connections, kept up (reopened when the server closes them) until stopped."""

    def __init__(self, port, slowloris, partial):
        self.port, self.stop = port, threading.Event()
        self.threads = [threading.Thread(target=self.slowloris, args=(slowloris,)),
                        threading.Thread(target=self.partial, args=(partial,))]
        self.opened = 0

    def connect(self, first_bytes):
        try:
            c = socket.create_connection(("127.0.0.1", self.port), timeout=2)
            c.sendall(first_bytes)
            self.opened += 1
            return c
        except OSError:
            return None

    def slowloris(self, count):
        conns = [self.connect(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n") for _ in range(count)]
        n = 0
        while not self.stop.wait(1.0):
            for i, c in enumerate(conns):
                try:
                    c.sendall(b"X-Drip-%d: 1\r\n" % n)
                except (OSError, AttributeError):
                    conns[i] = self.connect(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n")
            n += 1
        for c in conns:
            if c:
                c.close()

    def partial(self, count):
        conns = [self.connect(b"GET /health HTTP/1.1\r\nHo") for _ in range(count)]
        while not self.stop.wait(1.0):
            for i, c in enumerate(conns):
                try:
                    c.settimeout(0.0)
                    if c.recv(1) == b"":
                        raise OSError("closed")
                except BlockingIOError:
                    pass
                except (OSError, AttributeError):
                    conns[i] = self.connect(b"GET /health HTTP/1.1\r\nHo")
        for c in conns:
            if c:
                c.close()

    def __enter__(self):
        for t in self.threads:
            t.start()
        time.sleep(2.0)  # let the flood build up
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


def run_load(base, args):
    """Returns (generated tokens per second, /health latencies in seconds)."""
    latencies, done = [], threading.Event()

    def probe():
        while not done.is_set():
            start = time.monotonic()
            try:
                ok = httpx.get(base + "/health", timeout=5).status_code == 200
            except httpx.HTTPError:
                ok = False
            latencies.append(time.monotonic() - start if ok else float("inf"))
            done.wait(0.1)

    prober = threading.Thread(target=probe)
    prober.start()

    def one(i):
        r = httpx.post(base + "/v1/completions", timeout=600,
                       json={"prompt": f"Story {i}: Once upon a time", "max_tokens": args.tokens,
                             "ignore_eos": True, "temperature": 0.8, "seed": i})
        r.raise_for_status()
        return r.json()["usage"]["completion_tokens"]

    start = time.monotonic()
    with futures.ThreadPoolExecutor(args.clients) as pool:
        tokens = sum(pool.map(one, range(args.requests)))
    elapsed = time.monotonic() - start
    done.set()
    prober.join()
    return tokens / elapsed, latencies


def p99(values):
    values = sorted(values)
    return values[min(len(values) - 1, int(0.99 * len(values)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kestrel", default="build/release/tools/kestrel")
    ap.add_argument("--model", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--requests", type=int, default=32)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--slowloris", type=int, default=500)
    ap.add_argument("--partial", type=int, default=200)
    args = ap.parse_args()
    proc, port = start_server(args)
    base = f"http://127.0.0.1:{port}"
    ratios = []
    try:
        run_load(base, args)  # warm-up
        for rnd in range(args.rounds):
            quiet, quiet_lat = run_load(base, args)
            with Attack(port, args.slowloris, args.partial) as attack:
                attacked, attacked_lat = run_load(base, args)
            ratios.append(attacked / quiet)
            print(f"round {rnd}: quiet {quiet:.1f} tok/s (health p99 {p99(quiet_lat) * 1000:.0f} ms), "
                  f"attacked {attacked:.1f} tok/s (health p99 {p99(attacked_lat) * 1000:.0f} ms, "
                  f"max {max(attacked_lat) * 1000:.0f} ms, {attack.opened} hostile connections opened), "
                  f"ratio {attacked / quiet:.3f}", flush=True)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    print(f"median attacked/quiet throughput: {statistics.median(ratios):.3f} over {len(ratios)} rounds")


if __name__ == "__main__":
    main()
