#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer folder read from a GGUF file, for lm-eval's `tokenizer=` argument.

Usage (in the lm-eval venv, which has transformers and gguf; see bench/lm_eval/run.sh):
    python bench/lm_eval/export_tokenizer.py MODEL.gguf OUT_DIR

transformers reads the vocabulary, merges and special tokens from the GGUF's tokenizer.ggml.*
metadata (AutoTokenizer.from_pretrained(folder, gguf_file=name), which needs the `gguf`
package); nothing is downloaded. The folder it writes (tokenizer.json, tokenizer_config.json,
special_tokens_map.json, ...) loads offline with AutoTokenizer.from_pretrained(OUT_DIR).
bench/lm_eval/check_tokenizer.py compares its ids with the server's /tokenize.
"""
import argparse
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from transformers import AutoTokenizer  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("out_dir")
    args = ap.parse_args()
    gguf = Path(args.gguf).expanduser().resolve()
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.save_pretrained(args.out_dir)
    print(f"{type(tok).__name__}: {len(tok)} tokens, bos={tok.bos_token!r} eos={tok.eos_token!r} "
          f"-> {args.out_dir}")


if __name__ == "__main__":
    main()
