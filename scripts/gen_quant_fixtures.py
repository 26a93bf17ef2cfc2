#!/usr/bin/env python3
"""Makes the k-quant test fixtures under tests/data/quant/ from llama.cpp itself (run by hand).

What it does:
  1. Writes synthetic Llama GGUF files (F32, random weights, rows of 256) with gguf-py: a 16-layer
     model with an output.weight and a 10-layer model with tied embeddings.
  2. Quantizes each with llama.cpp's llama-quantize to Q3_K_S/M/L, Q4_K_S/M, Q5_K_S/M, Q6_K and Q2_K.
     (Which type llama.cpp chose for each tensor, for all its file types, is recorded by
     scripts/gen_recipe_fixture.py -> recipe_types.txt.)
  3. Takes 8 blocks of a Q2_K, a Q3_K, a Q4_K, a Q5_K and a Q6_K tensor that llama.cpp wrote and
     records their raw bytes, gguf-py's dequantization of them and the F32 values they were
     quantized from -> q2_k.bin, q3_k.bin, q4_k.bin, q5_k.bin, q6_k.bin (format below).
  4. The same for GGML's 32-blocks Q4_1, Q5_0 and Q5_1 (llama-quantize with those ftypes)
     -> q4_1.bin, q5_0.bin, q5_1.bin.

  --llama-check DIR instead writes DIR/stories260K-padded-f32.gguf: shared/models/stories260K.gguf
  zero-padded to dimensions that are multiples of 256 (n_embd 256, 32 heads of 8, 16 KV heads,
  n_ff 512; norm weights halved and eps quartered so RMSNorm over the zero-padded width gives the
  same result), a real model that computes the same logits and that k-quants apply to. Used to
  check by hand that files from `kestrel quantize ... Q4_K_M` load and run in llama.cpp.

Needs: gguf==0.19.0 and numpy (pip install gguf==0.19.0 into a venv), and a built llama-quantize:
  python scripts/gen_quant_fixtures.py --llama-quantize /path/to/llama-quantize

Fixture .bin format (little endian): magic b"KQFX", u32 version (1), u32 GGML type id,
u32 block count B, u32 bytes per block, then B blocks of raw bytes, then B*block_size float32
values dequantized by gguf-py, then B*block_size float32 values of the original F32 tensor
(block_size is 256 for k-quants, 32 for Q4_1/Q5_0/Q5_1).
"""
import argparse
import os
import struct
import subprocess
import sys
import tempfile

import numpy as np
import gguf

N_EMBD = 256
N_FF = 256
N_VOCAB = 256
FTYPES = ["Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "Q2_K"]
LEGACY_FTYPES = ["Q4_1", "Q5_0", "Q5_1"]
FIXTURE_BLOCKS = 8


def write_llama_header(w, n_layer, n_embd, n_ff, n_head, n_head_kv, eps, ctx=256):
    w.add_context_length(ctx)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(eps)
    w.add_rope_dimension_count(n_embd // n_head)


def add_tensors_and_close(w, tensors):
    """Adds name -> array tensors to a GGUFWriter and writes the file."""
    for name, t in tensors.items():
        w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def special_rows(rng):
    """Rows of 256 with the shapes that stress a quantizer: one block each."""
    rows = [
        rng.uniform(0.0, 0.05, N_EMBD),                        # all positive
        rng.laplace(0.0, 0.02, N_EMBD),                        # heavy tails
        np.where(np.arange(N_EMBD) == 37, 0.9, rng.normal(0, 0.02, N_EMBD)),  # one outlier
        np.where(rng.uniform(size=N_EMBD) < 0.1, rng.normal(0, 0.05, N_EMBD), 0.0),  # sparse
        np.full(N_EMBD, -0.03),                                # constant, negative
        rng.normal(0.0, 1e-4, N_EMBD),                         # tiny: subnormal F16 scales
        rng.normal(0.0, 0.02, N_EMBD),
        rng.normal(0.5, 0.3, N_EMBD),                          # large, offset
    ]
    return np.stack(rows).astype(np.float32)


def synthetic_model(path, n_layer, tied, seed):
    rng = np.random.default_rng(seed)
    tensors = {}

    def matrix(rows, cols):
        return rng.normal(0.0, 0.02, (rows, cols)).astype(np.float32)

    tensors["token_embd.weight"] = matrix(N_VOCAB, N_EMBD)
    tensors["output_norm.weight"] = np.ones(N_EMBD, np.float32)
    if not tied:
        out = matrix(N_VOCAB, N_EMBD)
        out[:FIXTURE_BLOCKS] = special_rows(rng)
        tensors["output.weight"] = out
    for i in range(n_layer):
        b = f"blk.{i}."
        tensors[b + "attn_norm.weight"] = np.ones(N_EMBD, np.float32)
        for name in ["attn_q", "attn_k", "attn_v", "attn_output"]:
            m = matrix(N_EMBD, N_EMBD)
            if i == 1 and name == "attn_q":
                m[:FIXTURE_BLOCKS] = special_rows(rng)
            tensors[b + name + ".weight"] = m
        tensors[b + "ffn_norm.weight"] = np.ones(N_EMBD, np.float32)
        tensors[b + "ffn_gate.weight"] = matrix(N_FF, N_EMBD)
        tensors[b + "ffn_up.weight"] = matrix(N_FF, N_EMBD)
        tensors[b + "ffn_down.weight"] = matrix(N_EMBD, N_FF)
    w = gguf.GGUFWriter(path, "llama")
    write_llama_header(w, n_layer, N_EMBD, N_FF, 4, 4, 1e-5)
    w.add_file_type(0)
    add_tensors_and_close(w, tensors)
    return tensors


def llama_quantize(binary, src, dst, ftype):
    subprocess.run([binary, src, dst, ftype], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return gguf.GGUFReader(dst)


def write_block_fixture(path, reader, tensor_name, originals):
    t = next(t for t in reader.tensors if t.name == tensor_name)
    qtype = t.tensor_type
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    raw = np.asarray(t.data).view(np.uint8).reshape(-1)
    blocks_per_row = int(t.shape[0]) // block_size
    # Block 0 of each of the first rows (the special rows), one block per row.
    picks = [r * blocks_per_row for r in range(FIXTURE_BLOCKS)]
    data = b"".join(raw[p * type_size:(p + 1) * type_size].tobytes() for p in picks)
    blocks = np.frombuffer(data, np.uint8).reshape(FIXTURE_BLOCKS, type_size)
    deq = gguf.quants.dequantize(blocks, qtype).astype(np.float32).reshape(-1)
    orig = originals[:FIXTURE_BLOCKS, :block_size].astype(np.float32).reshape(-1)
    with open(path, "wb") as f:
        f.write(b"KQFX")
        f.write(struct.pack("<IIII", 1, int(qtype), FIXTURE_BLOCKS, type_size))
        f.write(data)
        f.write(deq.tobytes())
        f.write(orig.tobytes())
    print(f"wrote {path}: {FIXTURE_BLOCKS} {qtype.name} blocks of {tensor_name}")


def make_fixtures(binary, out_dir):
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        models = [("llama16", 16, False, 1), ("llama10_tied", 10, True, 2)]
        for model_name, n_layer, tied, seed in models:
            src = os.path.join(tmp, model_name + "-f32.gguf")
            tensors = synthetic_model(src, n_layer, tied, seed)
            for ftype in FTYPES:
                dst = os.path.join(tmp, f"{model_name}-{ftype}.gguf")
                reader = llama_quantize(binary, src, dst, ftype)
                if model_name == "llama16" and ftype == "Q4_K_M":
                    write_block_fixture(os.path.join(out_dir, "q4_k.bin"), reader,
                                        "blk.1.attn_q.weight", tensors["blk.1.attn_q.weight"])
                    write_block_fixture(os.path.join(out_dir, "q6_k.bin"), reader,
                                        "output.weight", tensors["output.weight"])
                if model_name == "llama16" and ftype == "Q3_K_S":
                    write_block_fixture(os.path.join(out_dir, "q3_k.bin"), reader,
                                        "blk.1.attn_q.weight", tensors["blk.1.attn_q.weight"])
                if model_name == "llama16" and ftype == "Q2_K":
                    write_block_fixture(os.path.join(out_dir, "q2_k.bin"), reader,
                                        "blk.1.attn_q.weight", tensors["blk.1.attn_q.weight"])
                if model_name == "llama16" and ftype == "Q5_K_M":
                    write_block_fixture(os.path.join(out_dir, "q5_k.bin"), reader,
                                        "blk.1.attn_q.weight", tensors["blk.1.attn_q.weight"])
            if model_name == "llama16":
                for ftype in LEGACY_FTYPES:
                    dst = os.path.join(tmp, f"{model_name}-{ftype}.gguf")
                    reader = llama_quantize(binary, src, dst, ftype)
                    write_block_fixture(os.path.join(out_dir, ftype.lower() + ".bin"), reader,
                                        "blk.1.attn_q.weight", tensors["blk.1.attn_q.weight"])


def padded_stories(src_path, dst_path):
    """stories260K zero-padded so every row length is a multiple of 256 (same logits)."""
    r = gguf.GGUFReader(src_path)
    field = lambda k: r.fields[k].contents()
    n_embd, n_head, n_kv = field("llama.embedding_length"), field("llama.attention.head_count"), \
        field("llama.attention.head_count_kv")
    head_dim = n_embd // n_head
    E, FF = 256, 512
    H = E // head_dim                     # 32 heads of the same size
    HKV = H // (n_head // n_kv)           # keep the heads-per-KV-head ratio
    eps = float(field("llama.attention.layer_norm_rms_epsilon"))

    def pad(a, shape):
        out = np.zeros(shape, np.float32)
        out[tuple(slice(0, s) for s in a.shape)] = a
        return out

    w = gguf.GGUFWriter(dst_path, "llama")
    # sum/E + eps' must be (sum/n_embd + eps) * n_embd/E for RMSNorm to scale by the same factor.
    write_llama_header(w, field("llama.block_count"), E, FF, H, HKV, eps * n_embd / E,
                       field("llama.context_length"))
    w.add_file_type(0)
    w.add_tokenizer_model(field("tokenizer.ggml.model"))
    w.add_token_list(field("tokenizer.ggml.tokens"))
    w.add_token_scores(field("tokenizer.ggml.scores"))
    w.add_token_types(field("tokenizer.ggml.token_type"))
    w.add_unk_token_id(field("tokenizer.ggml.unknown_token_id"))
    w.add_bos_token_id(field("tokenizer.ggml.bos_token_id"))
    w.add_eos_token_id(field("tokenizer.ggml.eos_token_id"))
    norm_scale = np.float32(n_embd / E) ** 0.5   # rms over E of the padded vector is smaller
    for t in r.tensors:
        a = np.array(t.data, np.float32)
        name = t.name
        if name.endswith("norm.weight"):
            a = pad(a * norm_scale, (E,))
        elif name.endswith(("attn_q.weight", "attn_output.weight")):
            a = pad(a, (E, E))
        elif name.endswith(("attn_k.weight", "attn_v.weight")):
            a = pad(a, (HKV * head_dim, E))
        elif name.endswith(("ffn_gate.weight", "ffn_up.weight")):
            a = pad(a, (FF, E))
        elif name.endswith("ffn_down.weight"):
            a = pad(a, (E, FF))
        elif name in ("token_embd.weight", "output.weight"):
            a = pad(a, (a.shape[0], E))
        w.add_tensor(name, a)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {dst_path}")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--llama-quantize", help="path of llama.cpp's llama-quantize")
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "quant"))
    parser.add_argument("--llama-check", metavar="DIR", help="write the padded stories260K instead")
    parser.add_argument("--stories", default=os.path.join(here, "..", "..", "shared", "models",
                                                          "stories260K.gguf"))
    args = parser.parse_args()
    if args.llama_check:
        os.makedirs(args.llama_check, exist_ok=True)
        padded_stories(args.stories, os.path.join(args.llama_check, "stories260K-padded-f32.gguf"))
        return
    if not args.llama_quantize:
        sys.exit("--llama-quantize is required")
    make_fixtures(args.llama_quantize, os.path.normpath(args.out))


if __name__ == "__main__":
    main()
