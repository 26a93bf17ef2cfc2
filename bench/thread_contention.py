#!/usr/bin/env python3
"""Decode speed of `kestrel run -t 2` against `-t 1`, on a quiet machine and with busy competitors
(issue 16, part 6: the thread pool when other processes keep the cores busy).

For each number of competitors (`python3 -c 'while True: pass'` processes, started before the
runs of that level and killed after them), every round runs each binary with -t 1 and -t 2
(alternating which goes first, so drift hits both alike). It parses the generation rate that
`kestrel run` prints on stderr and reports medians over rounds, the median of the pairwise ratios
t2/t1 within a round, and, with two binaries, the median of the pairwise ratios second/first at
each thread count (an old build against a new one).

  bench/thread_contention.py [--model M] [--kestrel BIN [BIN2]] [--busy 0 1 2] [--rounds 5] [-n 128]

Set KESTREL_ISA=avx2|avx512 in the environment to force a kernel table. Figures, not a test: other
work on the machine moves them; the load average is printed before each level.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MODEL = Path.home() / ".cache/kestrel/models/gemma-3-270m-q4_k_m.gguf"
PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."
RATE = re.compile(r"generation: (\d+) tokens, ([\d.]+) tok/s")


def decode_rate(binary, model, threads, n_predict):
    cmd = [binary, "run", str(model), "-p", PROMPT, "-n", str(n_predict), "-t", str(threads), "--ignore-eos"]
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    match = RATE.search(proc.stderr)
    if proc.returncode != 0 or match is None:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr}")
    return float(match.group(2))


def start_competitors(count):
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def stop_competitors(procs):
    for proc in procs:
        proc.kill()
    for proc in procs:
        proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=str(DEFAULT_MODEL))
    ap.add_argument("--kestrel", nargs="+", default=[str(ROOT / "build/release/tools/kestrel")],
                    help="one binary, or two (old new) to compare them run by run")
    ap.add_argument("--busy", type=int, nargs="+", default=[0, 1, 2], help="competitor counts")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("-n", "--n-predict", type=int, default=128)
    args = ap.parse_args()
    if len(args.kestrel) > 2:
        sys.exit("--kestrel takes one or two binaries")

    print(f"model: {args.model}; rounds: {args.rounds}; -n {args.n_predict}; "
          f"KESTREL_ISA={os.environ.get('KESTREL_ISA', '(auto)')}")
    for busy in args.busy:
        print(f"\n## {busy} busy competitor(s); load average before: {os.getloadavg()[0]:.2f}")
        rates = {(b, t): [] for b in range(len(args.kestrel)) for t in (1, 2)}
        competitors = start_competitors(busy)
        try:
            for r in range(args.rounds):
                for b, binary in enumerate(args.kestrel):
                    for t in ((1, 2) if (r + b) % 2 == 0 else (2, 1)):
                        rates[(b, t)].append(decode_rate(binary, args.model, t, args.n_predict))
        finally:
            stop_competitors(competitors)
        print("| binary | -t 1 tok/s (median) | -t 2 tok/s (median) | t2/t1 (median of pairs) |")
        print("|---|---:|---:|---:|")
        for b, binary in enumerate(args.kestrel):
            t1, t2 = rates[(b, 1)], rates[(b, 2)]
            ratio = statistics.median(y / x for x, y in zip(t1, t2))
            print(f"| {binary} | {statistics.median(t1):.1f} | {statistics.median(t2):.1f} | {ratio:.2f} |")
        if len(args.kestrel) == 2:
            for t in (1, 2):
                ratio = statistics.median(y / x for x, y in zip(rates[(0, t)], rates[(1, t)]))
                print(f"-t {t}: second/first binary, median of pairs: {ratio:.2f}")
        for key, values in rates.items():
            print(f"  raw binary {key[0]} -t {key[1]}: {' '.join(f'{v:.1f}' for v in values)}")


if __name__ == "__main__":
    main()
