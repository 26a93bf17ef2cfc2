#!/usr/bin/env python3
"""KV cache types and quality: perplexity and KL divergence against F32 K/V, figures, never pass/fail.

For each model, text and KV type T: `kestrel perplexity MODEL -f TEXT --ctx C --chunks N --kv-type T
--kld-kv-type f32 --json` (the F32 run and the T run over the same chunks in one process: ppl of
both, the change, mean and p99 KL divergence of T's next-token distributions from F32's, top-1
agreement), and beside it llama.cpp's `llama-perplexity -f TEXT -c C --chunks N -fa on -ctk T -ctv T`
for the same file (its f32 run as its base; it has no fp8 nor rotation, so those rows are
Kestrel's only).

Texts: ../shared/models/text/wikitext-2-test.txt, and a code text made here from Python's own
standard library sources (/usr/lib/python3.11: argparse, typing, dataclasses, collections, json;
about 350 KB, deterministic; written to ~/.cache/kestrel/text/python-stdlib.txt).

  python3 bench/kv_quality.py ~/.cache/kestrel/models/gemma-3-270m-q4_k_m.gguf \\
      --llama-perplexity /path/to/llama.cpp/build/bin/llama-perplexity --chunks 20
"""
import argparse
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STDLIB = ["argparse.py", "typing.py", "dataclasses.py", "collections/__init__.py", "json/decoder.py",
          "json/encoder.py"]


def code_text():
    out = Path.home() / ".cache" / "kestrel" / "text" / "python-stdlib.txt"
    if not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("".join((Path("/usr/lib/python3.11") / f).read_text() for f in STDLIB))
    return out


def kestrel(args, model, text, kv_type):
    cmd = [args.kestrel, "perplexity", model, "-f", str(text), "--ctx", str(args.ctx), "--chunks", str(args.chunks),
           "-t", str(args.threads), "--kld-kv-type", "f32", "--json"]
    cmd += ["--kv-type", "q4_0", "--kv-rotate"] if kv_type == "q4_0r" else ["--kv-type", kv_type]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def llama(args, model, text, kv_type):
    if not args.llama_perplexity or kv_type not in ("f32", "f16", "bf16", "q8_0", "q4_0"):
        return None
    cmd = [args.llama_perplexity, "-m", model, "-f", str(text), "-c", str(args.ctx), "--chunks", str(args.chunks),
           "-t", str(args.threads), "-fa", "on", "-ctk", kv_type, "-ctv", kv_type]
    out = subprocess.run(cmd, capture_output=True, text=True)
    m = re.search(r"Final estimate: PPL = ([\d.]+)", out.stdout + out.stderr)
    return float(m.group(1)) if m else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("models", nargs="+")
    ap.add_argument("--kestrel", default=str(ROOT / "build" / "release" / "tools" / "kestrel"))
    ap.add_argument("--llama-perplexity", default="")
    ap.add_argument("--types", nargs="+", default=["f16", "bf16", "fp8", "q8_0", "q4_0", "q4_0r"])
    ap.add_argument("--texts", nargs="+", default=["wikitext", "code"])
    ap.add_argument("--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("-t", "--threads", type=int, default=2)
    args = ap.parse_args()
    texts = {"wikitext": ROOT.parent / "shared" / "models" / "text" / "wikitext-2-test.txt", "code": code_text()}

    rows = []
    for model in args.models:
        for name in args.texts:
            text = texts[name]
            llama_base = llama(args, model, text, "f32")
            for kv_type in args.types:
                k = kestrel(args, model, text, kv_type)
                l = llama(args, model, text, kv_type)
                row = {"model": Path(model).name, "text": name, "type": kv_type, "kestrel": k, "llama": l,
                       "llama_f32": llama_base}
                rows.append(row)
                print(json.dumps(row), flush=True)

    print(f"\nctx {args.ctx}, {args.chunks} chunks; base = F32 K/V of the same engine\n")
    print("| model | text | KV type | Kestrel PPL (f32 base) | change | mean KLD | p99 KLD | same top-1 | llama.cpp PPL (f32 base) | change |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        k = r["kestrel"]
        change = 100 * (k["ppl"] / k["ppl_base"] - 1)
        if r["llama"] is not None and r["llama_f32"]:
            llama_cells = f"{r['llama']:.4f} ({r['llama_f32']:.4f}) | {100 * (r['llama'] / r['llama_f32'] - 1):+.3f}%"
        else:
            llama_cells = "- | -"
        print(f"| {r['model']} | {r['text']} | {r['type']} | {k['ppl']:.4f} ({k['ppl_base']:.4f}) | {change:+.3f}% "
              f"| {k['kld_mean']:.5f} | {k['kld_p99']:.4f} | {100 * k['top1_agreement']:.2f}% | {llama_cells} |")


if __name__ == "__main__":
    sys.exit(main())
