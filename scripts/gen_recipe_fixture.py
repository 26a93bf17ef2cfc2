#!/usr/bin/env python3
"""Records which type llama.cpp's llama-quantize gives each tensor, for every file type it names
that Kestrel writes, on small synthetic models -> tests/data/quant/recipe_types.txt (run by hand).

The models (F32, random weights, written with gguf-py; rows of 256 unless said):
  llama16        Llama, 16 layers, 4 heads / 4 KV heads (n_gqa 1), its own output.weight
  llama10_tied   Llama, 10 layers, n_gqa 1, tied embeddings (no output.weight)
  llama12_gqa4   Llama, 12 layers, 8 heads / 2 KV heads (n_gqa 4)
  llama80_gqa4   Llama, 80 layers, n_gqa 4: llama.cpp calls it a 70B and gives attn_v more bits
  mixtral8       Llama with 8 experts (2 used), 6 layers: the n_expert == 8 rules
  qwen2moe4      Qwen2-MoE, 4 experts (2 used) and a shared expert, 5 layers, n_gqa 2
  llama4_w384    Llama, 4 layers, n_embd 384 / n_ff 640: rows that do not divide into 256-blocks
Each is quantized with `llama-quantize --dry-run` (the types, no data), once without an importance
matrix and once with one (a synthetic imatrix GGUF: some file types choose differently with one),
for every file type and for four sets of per-tensor options (OPTION_PLANS).

Format: `model NAME ARCH N_LAYER N_HEAD N_HEAD_KV N_EXPERT`, then `tensor NAME DIMS...` (innermost
first) for each tensor in file order, then `plan FTYPE rtn|imatrix TYPE...`: one type per tensor of
2 or more dimensions, same order (1-D tensors stay F32), a run of one type written TYPE*COUNT;
llama-quantize options, when given, come before the types as single tokens (--pure,
--tensor-type=PATTERN=TYPE, --output-tensor-type=TYPE, ...).

Needs gguf==0.19.0 and numpy (the repository's .venv), and llama-quantize from llama-cpp-python
0.3.36's vendored llama.cpp (see docs/QUANTIZATION.md):
  .venv/bin/python scripts/gen_recipe_fixture.py --llama-quantize /path/to/llama-quantize
"""
import argparse
import os
import re
import subprocess
import tempfile

import numpy as np
import gguf

from gen_quant_fixtures import add_tensors_and_close

# llama-quantize's names for the file types Kestrel writes (its QUANT_OPTIONS; Q1_0/Q2_0 are not
# Kestrel types, and its Q3_K/Q4_K/Q5_K aliases are Kestrel's pure types, not compared here).
FTYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q2_K_S", "Q3_K_S", "Q3_K_M", "Q3_K_L",
          "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M",
          "IQ1_S", "IQ1_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M", "IQ4_NL", "IQ4_XS", "TQ1_0",
          "TQ2_0", "MXFP4_MOE"]

# llama-quantize's per-tensor options on top of a file type, run on every model: --tensor-type
# (first matching pattern wins; an overridden tensor does not advance the mixture's counters),
# --pure with overrides, --leave-output-tensor, --output-tensor-type / --token-embedding-type.
OPTION_PLANS = [
    ("Q4_K_M", ["--tensor-type", r"blk\.0\.attn_v=q8_0", "--tensor-type", "ffn_down=q5_k", "--tensor-type", "down=q8_0"]),
    ("IQ2_XXS", ["--tensor-type", "attn_output=iq3_s", "--leave-output-tensor"]),
    ("Q3_K_M", ["--pure", "--tensor-type", "attn_v=q6_k", "--leave-output-tensor"]),
    ("Q5_K_S", ["--output-tensor-type", "q8_0", "--token-embedding-type", "q4_k"]),
]

MODELS = [
    # name, arch, n_layer, n_embd, n_ff, n_head, n_head_kv, n_expert, tied
    ("llama16", "llama", 16, 256, 256, 4, 4, 0, False),
    ("llama10_tied", "llama", 10, 256, 256, 4, 4, 0, True),
    ("llama12_gqa4", "llama", 12, 256, 512, 8, 2, 0, False),
    ("llama80_gqa4", "llama", 80, 256, 256, 8, 2, 0, False),  # only SEVENTY_B_FTYPES
    ("mixtral8", "llama", 6, 256, 256, 8, 2, 8, False),
    ("qwen2moe4", "qwen2moe", 5, 256, 256, 4, 2, 4, False),
    ("llama4_w384", "llama", 4, 384, 640, 6, 6, 0, False),
]
N_VOCAB = 256
# The 80-layer model, for the file types whose attn_v the 70B rule can change (Q3_K/Q4_K to Q5_K),
# and one (IQ2_XXS) whose attn_v rule comes first and does not have it.
SEVENTY_B_FTYPES = ["Q2_K", "Q3_K_S", "Q3_K_M", "Q4_K_S", "Q4_K_M", "IQ3_XXS", "IQ3_S", "IQ3_M", "IQ2_XXS"]


def model_tensors(rng, arch, n_layer, n_embd, n_ff, n_head, n_head_kv, n_expert, tied):
    """name -> array (numpy shape: outermost first)."""
    def m(*shape):
        return rng.normal(0.0, 0.02, shape).astype(np.float32)

    head_dim = n_embd // n_head
    t = {"token_embd.weight": m(N_VOCAB, n_embd), "output_norm.weight": np.ones(n_embd, np.float32)}
    if not tied:
        t["output.weight"] = m(N_VOCAB, n_embd)
    for i in range(n_layer):
        b = f"blk.{i}."
        t[b + "attn_norm.weight"] = np.ones(n_embd, np.float32)
        t[b + "attn_q.weight"] = m(n_head * head_dim, n_embd)
        t[b + "attn_k.weight"] = m(n_head_kv * head_dim, n_embd)
        t[b + "attn_v.weight"] = m(n_head_kv * head_dim, n_embd)
        t[b + "attn_output.weight"] = m(n_embd, n_head * head_dim)
        if arch == "qwen2moe":
            for p in ["q", "k", "v"]:
                rows = n_head * head_dim if p == "q" else n_head_kv * head_dim
                t[b + f"attn_{p}.bias"] = np.zeros(rows, np.float32)
        t[b + "ffn_norm.weight"] = np.ones(n_embd, np.float32)
        if n_expert == 0:
            t[b + "ffn_gate.weight"] = m(n_ff, n_embd)
            t[b + "ffn_up.weight"] = m(n_ff, n_embd)
            t[b + "ffn_down.weight"] = m(n_embd, n_ff)
            continue
        t[b + "ffn_gate_inp.weight"] = m(n_expert, n_embd)
        t[b + "ffn_gate_exps.weight"] = m(n_expert, n_ff, n_embd)
        t[b + "ffn_up_exps.weight"] = m(n_expert, n_ff, n_embd)
        t[b + "ffn_down_exps.weight"] = m(n_expert, n_embd, n_ff)
        if arch == "qwen2moe":
            t[b + "ffn_gate_inp_shexp.weight"] = m(1, n_embd)[0]
            t[b + "ffn_gate_shexp.weight"] = m(n_ff, n_embd)
            t[b + "ffn_up_shexp.weight"] = m(n_ff, n_embd)
            t[b + "ffn_down_shexp.weight"] = m(n_embd, n_ff)
    return t


def write_model(path, spec, seed):
    name, arch, n_layer, n_embd, n_ff, n_head, n_head_kv, n_expert, tied = spec
    tensors = model_tensors(np.random.default_rng(seed), arch, n_layer, n_embd, n_ff, n_head,
                            n_head_kv, n_expert, tied)
    w = gguf.GGUFWriter(path, arch)
    w.add_context_length(256)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_vocab_size(N_VOCAB)
    if n_expert:
        w.add_expert_count(n_expert)
        w.add_expert_used_count(2)
        if arch == "qwen2moe":
            w.add_expert_feed_forward_length(n_ff)
            w.add_expert_shared_feed_forward_length(n_ff)
    w.add_file_type(0)
    add_tensors_and_close(w, tensors)
    return tensors


def write_imatrix(path, tensors):
    """An importance matrix for every matrix (llama.cpp's GGUF imatrix layout)."""
    w = gguf.GGUFWriter(path, "")
    w.add_type("imatrix")
    w.add_array("imatrix.datasets", ["synthetic"])
    w.add_uint32("imatrix.chunk_count", 1)
    w.add_uint32("imatrix.chunk_size", 512)
    entries = {}
    for name, a in tensors.items():
        if a.ndim < 2 or not name.endswith(".weight"):
            continue
        n_mat = a.shape[0] if a.ndim == 3 else 1
        entries[name + ".in_sum2"] = np.full((n_mat, a.shape[-1]), 512.0, np.float32)
        entries[name + ".counts"] = np.full((n_mat, 1), 512.0, np.float32)
    add_tensors_and_close(w, entries)


LINE = re.compile(r"\[\s*\d+/\s*\d+\]\s+(\S+)\s+-.*?type =\s*(\S+),.*?size =.*?(?:\((\S+)\))?\s*$")


def dry_run(binary, src, ftype, imatrix, options=()):
    cmd = [binary, "--dry-run"] + list(options) + (["--imatrix", imatrix] if imatrix else []) + [src, ftype]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    types = {}
    for line in (out.stdout + out.stderr).splitlines():
        hit = LINE.search(line)
        if hit:
            name, stored, new = hit.groups()
            types[name] = (new or stored).upper()
    return types


def run_length(types):
    out, i = [], 0
    while i < len(types):
        j = i
        while j < len(types) and types[j] == types[i]:
            j += 1
        out.append(types[i] if j - i == 1 else f"{types[i]}*{j - i}")
        i = j
    return " ".join(out)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--llama-quantize", required=True, help="path of llama.cpp's llama-quantize")
    parser.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "quant", "recipe_types.txt"))
    args = parser.parse_args()
    lines = ["# Tensor types llama-quantize --dry-run chose for synthetic models (scripts/gen_recipe_fixture.py)",
             "# model NAME ARCH N_LAYER N_HEAD N_HEAD_KV N_EXPERT / tensor NAME DIMS (innermost first) /",
             "# plan FTYPE rtn|imatrix TYPE... (one per tensor, in the order above)"]
    with tempfile.TemporaryDirectory() as tmp:
        for seed, spec in enumerate(MODELS):
            name, arch, n_layer, _, _, n_head, n_head_kv, n_expert, _ = spec
            src = os.path.join(tmp, name + ".gguf")
            tensors = write_model(src, spec, seed)
            imatrix = os.path.join(tmp, name + ".imatrix.gguf")
            write_imatrix(imatrix, tensors)
            lines.append(f"model {name} {arch} {n_layer} {n_head} {n_head_kv} {n_expert}")
            for tname, a in tensors.items():
                lines.append(f"tensor {tname} " + " ".join(str(d) for d in reversed(a.shape)))
            ftypes = SEVENTY_B_FTYPES if n_layer == 80 else FTYPES
            matrices = [t for t, a in tensors.items() if a.ndim >= 2]
            runs = [(f, []) for f in ftypes] + ([] if n_layer == 80 else OPTION_PLANS)
            for ftype, options in runs:
                # options as single tokens: --pure, --tensor-type=PATTERN=TYPE, ...
                written = []
                for i, o in enumerate(options):
                    if o.startswith("--") and i + 1 < len(options) and not options[i + 1].startswith("--"):
                        written.append(o + "=" + options[i + 1])
                    elif o.startswith("--"):
                        written.append(o)
                for with_imatrix in (False, True):
                    types = dry_run(args.llama_quantize, src, ftype, imatrix if with_imatrix else None, options)
                    missing = [t for t in tensors if t not in types]
                    if missing:
                        raise SystemExit(f"{name} {ftype}: no type parsed for {missing[:3]}")
                    if any(types[t] != "F32" for t, a in tensors.items() if a.ndim < 2):
                        raise SystemExit(f"{name} {ftype}: a 1-D tensor is not F32")
                    lines.append(f"plan {ftype} {'imatrix' if with_imatrix else 'rtn'} " +
                                 "".join(w + " " for w in written) + run_length([types[t] for t in matrices]))
            print(f"{name}: {len(runs)} file types and option sets x 2")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
