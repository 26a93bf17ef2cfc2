#!/usr/bin/env python3
"""Writes the pre-quantized Hugging Face checkpoint fixtures under tests/data/prequant/ (run by hand,
never in CI).

Each fixture is a tiny random-weight Qwen2 or Llama model whose linear layers are packed by the
reference libraries' own code, as the checkpoints users download are:

  name                   packed by                                   what it exercises
  gptq_g128_sym          AutoGPTQ QuantLinear.pack (qlinear_cuda)    v1 zeros (z - 1), symmetric, groups of
                                                                     128 (per channel on 128-wide inputs)
  gptq_g32_actorder      AutoGPTQ QuantLinear.pack with g_idx        desc_act: a random column-to-group map,
                                                                     asymmetric, v1 zeros
  gptq_v2_g64_llama      AutoGPTQ, then GPTQModel's v1 -> v2 zeros   Llama (Q/K rows permuted on load),
                                                                     checkpoint_format gptq_v2, asymmetric
  gptq_8bit_g32          AutoGPTQ QuantLinear.pack, 8 bits           symmetric 8-bit -> Q8_0
  gptq_2bit_g64          AutoGPTQ QuantLinear.pack, 2 bits           16 values per int32 -> INT4_ZP (levels 0..3)
  awq_g64                AutoAWQ WQLinear_GEMM.from_linear           AWQ's interleaved nibble order, zeros
  ct_w4_g32_sym          compressed-tensors PackedQuantization-      pack-quantized INT4, symmetric (+8)
                         Compressor.compress
  ct_w4_g64_asym         the same                                    packed zero points (along rows)
  ct_fp8_channel         compressed-tensors float-quantized          FP8 E4M3 per-channel scales
  ct_fp8_block           the same with 64 x 64 block scales          no per-row format: the exact F32 fallback

Scales and zeros are round-to-nearest over each group, as GPTQ's Quantizer finds them (no Hessian
search: the packing, not the search, is under test); the weights handed to the packers are the
fake-quantized values s * (q - z), so every packer's own rounding reproduces q exactly.

The reference is what GPTQModel's safetensors-level dequantizer (gptqmodel.utils.model_dequant.
dequantize_model, target float32) makes of each checkpoint: a plain float32 folder. reference.json
holds, per linear module, the FNV-1a 64 hash of its dequantized float32 weight bytes ([rows][cols],
the checkpoint's row and column order) - Kestrel must produce these values bit for bit - and
transformers' logits and greedy tokens of that dequantized model (gen_hf_fixtures.reference_runs;
the greedy runs are recorded but hold near-ties at the 8-bit activation rounding Kestrel's integer
kernels add, so the tests compare logits).

Pinned versions: the venv of gen_hf_fixtures.py (torch 2.15.0, transformers 4.57.6, ...) plus
  compressed-tensors 0.20.1, accelerate 1.15.0, auto-gptq 0.7.1 (--no-deps; its CUDA extension is
  not used), autoawq 0.2.9 and gptqmodel 7.7.0 (--no-deps, BUILD_CUDA_EXT=0); gptqmodel and autoawq
  need a newer / older transformers than 4.57, so only the modules used here are imported (their
  package __init__ files are bypassed, see import_reference_modules).
  /tmp/hfvenv/bin/python scripts/gen_prequant_fixtures.py [--out tests/data/prequant] [--only NAME ...]
"""

import argparse
import copy
import importlib
import importlib.machinery
import json
import math
import os
import shutil
import sys
import tempfile
import types

import numpy as np
import torch
import transformers
from safetensors.torch import load_file, save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_hf_fixtures as hf  # noqa: E402



def import_reference_modules():
    """AutoGPTQ's QuantLinear, AutoAWQ's WQLinear_GEMM and GPTQModel's model_dequant, imported
    without running their packages' __init__ (which pull in transformers versions other than 4.57)."""
    site = os.path.dirname(os.path.dirname(transformers.__file__))
    for pkg in ["auto_gptq", "auto_gptq.nn_modules", "auto_gptq.nn_modules.qlinear", "awq", "gptqmodel",
                "gptqmodel.quantization", "gptqmodel.utils", "gptqmodel.models"]:
        m = types.ModuleType(pkg)
        m.__path__ = [os.path.join(site, *pkg.split("."))]
        m.__spec__ = importlib.machinery.ModuleSpec(pkg, None, is_package=True)
        m.__spec__.submodule_search_locations = m.__path__
        sys.modules[pkg] = m
    sys.modules["gptqmodel"].DEBUG_ON = False
    python = importlib.import_module("gptqmodel.utils.python")
    for name in ["gte_python_3_13_3", "gte_python_3_14", "has_gil_control", "has_gil_disabled",
                 "log_gil_requirements_for"]:
        setattr(sys.modules["gptqmodel.utils"], name, getattr(python, name))
    gptq = importlib.import_module("auto_gptq.nn_modules.qlinear.qlinear_cuda")
    awq = importlib.import_module("awq.modules.linear.gemm")
    awq_packing = importlib.import_module("awq.utils.packing_utils")
    dequant = importlib.import_module("gptqmodel.utils.model_dequant")
    return gptq.QuantLinear, awq.WQLinear_GEMM, dequant, awq_packing


def load_gguf(path):
    """A GGUF read by transformers (its GGUF reader dequantizes every tensor) into float32: the
    tokenizer and the model, with config.architectures set (the reader leaves it unset)."""
    gdir, gname = os.path.split(os.path.abspath(path))
    tok = transformers.AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    model = transformers.AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32).eval()
    model.config.architectures = [type(model).__name__]
    return tok, model


def rtn_params(w, bits, group_cols, sym):
    """GPTQ Quantizer.find_params on each group (columns group_cols[g] of w [out, in]): scale and
    zero [out, groups]; scales rounded to float16 first (what the checkpoints store)."""
    maxq = 2 ** bits - 1
    scales, zeros = [], []
    for cols in group_cols:
        x = w[:, cols]
        xmin = torch.clamp(x.min(dim=1).values, max=0)
        xmax = torch.clamp(x.max(dim=1).values, min=0)
        if sym:
            xmax = torch.maximum(xmin.abs(), xmax)
            xmin = -xmax
        s = ((xmax - xmin) / maxq).half().float()
        s[s == 0] = 1
        z = torch.full_like(s, (maxq + 1) // 2) if sym else torch.round(-xmin / s)
        scales.append(s)
        zeros.append(z)
    return torch.stack(scales, 1), torch.stack(zeros, 1)


def fake_quantize(w, scales, zeros, g_idx, bits):
    """s * (q - z) with q = clamp(round(w / s) + z): float32, exact."""
    s = scales[:, g_idx]
    z = zeros[:, g_idx]
    q = torch.clamp(torch.round(w / s) + z, 0, 2 ** bits - 1)
    return s * (q - z)


def linear_modules(model):
    return [(n, m) for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and not n.endswith("lm_head")]


def base_model(arch, seed):
    if arch == "qwen2":
        cfg = transformers.Qwen2Config(hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=416,
                                       max_position_embeddings=512, rope_theta=1e6, tie_word_embeddings=True,
                                       bos_token_id=400, eos_token_id=400)
        cfg.architectures = ["Qwen2ForCausalLM"]
        model = transformers.Qwen2ForCausalLM(cfg)
    else:
        src = os.path.join(ROOT, "tests/data/hf/llama/config.json")
        vocab = json.load(open(src))["vocab_size"]
        cfg = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=1,
                                       num_attention_heads=4, num_key_value_heads=2, vocab_size=vocab,
                                       max_position_embeddings=512, rope_theta=10000.0, tie_word_embeddings=True)
        cfg.architectures = ["LlamaForCausalLM"]
        model = transformers.LlamaForCausalLM(cfg)
    hf.randomize(model, seed, False, 0.25)  # tied embeddings: a small scale (gen_hf_fixtures.randomize)
    with torch.no_grad():  # the embedding is saved as float16
        model.model.embed_tokens.weight.copy_(model.model.embed_tokens.weight.half().float())
    return model.eval()


def copy_tokenizer(arch, folder):
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(os.path.join(ROOT, "tests/data/hf", arch, f), os.path.join(folder, f))


def write_config(model, folder, quantization_config):
    model.config.save_pretrained(folder)
    path = os.path.join(folder, "config.json")
    cfg = json.load(open(path))
    cfg["quantization_config"] = {k: v for k, v in quantization_config.items() if not k.startswith("_")}
    json.dump(cfg, open(path, "w"), indent=2)


def float_tensors(model, quantized):
    """The state dict minus the quantized modules' weights (and the tied head); the embedding in
    float16, as checkpoints ship it."""
    out = {}
    for k, v in model.state_dict().items():
        if any(k == n + ".weight" for n in quantized) or k == "lm_head.weight":
            continue
        out[k] = (v.half() if "embed_tokens" in k else v).detach().clone().contiguous()
    return out


def group_map(cols, group, act_order, rng):
    """g_idx [cols] and, per group, its columns: column / group, or GPTQ's act-order map (groups
    of consecutive positions in a random permutation)."""
    perm = torch.from_numpy(rng.permutation(cols)) if act_order else torch.arange(cols)
    g_idx = torch.empty(cols, dtype=torch.int32)
    g_idx[perm] = torch.arange(cols, dtype=torch.int32) // group
    groups = [torch.nonzero(g_idx == g).flatten() for g in range(cols // group)]
    return g_idx, groups


def pack_gptq(model, folder, QuantLinear, bits, group, sym, act_order, rng, v2=False, gptq_dequant=None):
    tensors = {}
    names = []
    with torch.no_grad():
        for name, lin in linear_modules(model):
            out_f, in_f = lin.weight.shape
            g_idx, groups = group_map(in_f, min(group, in_f), act_order, rng)
            scales, zeros = rtn_params(lin.weight, bits, groups, sym)
            assert sym or zeros.min() >= 1, "v1 zeros cannot hold 0"
            lin.weight.copy_(fake_quantize(lin.weight, scales, zeros, g_idx.long(), bits))
            ql = QuantLinear(bits, min(group, in_f), in_f, out_f, lin.bias is not None, weight_dtype=torch.float32)
            ql.pack(lin, scales, zeros, g_idx)
            qzeros = ql.qzeros
            if v2:
                qzeros = gptq_dequant._correct_gptq_v1_qzeros(qzeros, bits)
            tensors[name + ".qweight"] = ql.qweight.contiguous()
            tensors[name + ".qzeros"] = qzeros.contiguous()
            tensors[name + ".scales"] = ql.scales.half().contiguous()
            tensors[name + ".g_idx"] = ql.g_idx.to(torch.int32).contiguous()
            names.append(name)
    tensors.update(float_tensors(model, names))
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    return {"quant_method": "gptq", "bits": bits, "group_size": group, "desc_act": act_order, "sym": sym,
            "true_sequential": True, "checkpoint_format": "gptq_v2" if v2 else "gptq"}


def pack_awq(model, folder, WQLinear_GEMM, group, rng):
    tensors = {}
    names = []
    with torch.no_grad():
        for name, lin in linear_modules(model):
            out_f, in_f = lin.weight.shape
            g_idx, groups = group_map(in_f, group, False, rng)
            scales, zeros = rtn_params(lin.weight, 4, groups, False)
            lin.weight.copy_(fake_quantize(lin.weight, scales, zeros, g_idx.long(), 4))
            wq = WQLinear_GEMM.from_linear(lin, 4, group, scales=scales.t().contiguous(), zeros=zeros.t().contiguous())
            tensors[name + ".qweight"] = wq.qweight.contiguous()
            tensors[name + ".qzeros"] = wq.qzeros.contiguous()
            tensors[name + ".scales"] = wq.scales.contiguous()
            names.append(name)
    tensors.update(float_tensors(model, names))
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    return {"quant_method": "awq", "bits": 4, "group_size": group, "zero_point": True, "version": "gemm"}


def pack_compressed(model, folder, kind, group, sym, rng):
    from compressed_tensors.compressors.naive_quantized.base import FloatQuantizationCompressor
    from compressed_tensors.compressors.pack_quantized.base import PackedQuantizationCompressor
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    if kind == "int4":
        args = QuantizationArgs(num_bits=4, type="int", symmetric=sym, strategy="group", group_size=group)
        compressor, fmt = PackedQuantizationCompressor, "pack-quantized"
    elif kind == "fp8":
        args = QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy="channel")
        compressor, fmt = FloatQuantizationCompressor, "float-quantized"
    else:  # fp8 with [group x group] block scales (DeepSeek-V3's layout)
        args = QuantizationArgs(num_bits=8, type="float", symmetric=True, strategy="block",
                                block_structure=[group, group])
        compressor, fmt = FloatQuantizationCompressor, "float-quantized"
    scheme = QuantizationScheme(targets=["Linear"], weights=args)
    tensors = {}
    names = []
    with torch.no_grad():
        for name, lin in linear_modules(model):
            w = lin.weight.detach()
            if kind == "int4":
                g_idx, groups = group_map(w.shape[1], group, False, rng)
                scales, zeros = rtn_params(w, 4, groups, sym)
                w = fake_quantize(w, scales, zeros, g_idx.long(), 4)
                state = {"weight": w, "weight_scale": scales.half()}
                if not sym:
                    state["weight_zero_point"] = (zeros - 8).to(torch.int8)  # signed, as compressed-tensors keeps it
            elif kind == "fp8":
                scale = (w.abs().amax(dim=1, keepdim=True) / 448.0).half().float()
                w = (w / scale).to(torch.float8_e4m3fn).float() * scale
                state = {"weight": w, "weight_scale": scale}
            else:
                r, c = w.shape
                blocks = w.reshape(r // group, group, c // group, group)
                scale = (blocks.abs().amax(dim=(1, 3)) / 448.0).half().float()  # [r / group, c / group]
                full = scale.repeat_interleave(group, 0).repeat_interleave(group, 1)
                w = (w / full).to(torch.float8_e4m3fn).float() * full
                state = {"weight": w, "weight_scale": scale}
            lin.weight.copy_(w)
            for k, v in compressor.compress(state, scheme).items():
                tensors[name + "." + k] = v.contiguous()
            names.append(name)
    tensors.update(float_tensors(model, names))
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    return {"_compressor": compressor, "_scheme": scheme, "quant_method": "compressed-tensors", "format": fmt, "quantization_status": "compressed",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": json.loads(args.model_dump_json()),
                                          "input_activations": None, "output_activations": None}},
            "ignore": ["lm_head"]}


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


FIXTURES = {
    "gptq_g128_sym": ("qwen2", lambda m, f, r, R: pack_gptq(m, f, R[0], 4, 128, True, False, r)),
    "gptq_g32_actorder": ("qwen2", lambda m, f, r, R: pack_gptq(m, f, R[0], 4, 32, False, True, r)),
    "gptq_v2_g64_llama": ("llama", lambda m, f, r, R: pack_gptq(m, f, R[0], 4, 64, False, False, r, v2=True,
                                                                 gptq_dequant=R[2])),
    "gptq_8bit_g32": ("qwen2", lambda m, f, r, R: pack_gptq(m, f, R[0], 8, 32, True, False, r)),
    "awq_g64": ("qwen2", lambda m, f, r, R: pack_awq(m, f, R[1], 64, r)),
    "ct_w4_g32_sym": ("qwen2", lambda m, f, r, R: pack_compressed(m, f, "int4", 32, True, r)),
    "ct_w4_g64_asym": ("qwen2", lambda m, f, r, R: pack_compressed(m, f, "int4", 64, False, r)),
    "ct_fp8_channel": ("qwen2", lambda m, f, r, R: pack_compressed(m, f, "fp8", 0, True, r)),
    "ct_fp8_block": ("qwen2", lambda m, f, r, R: pack_compressed(m, f, "fp8_block", 64, True, r)),
    "gptq_2bit_g64": ("qwen2", lambda m, f, r, R: pack_gptq(m, f, R[0], 2, 64, False, False, r)),
}


def build(name, out_root, refs, seed):
    arch, pack = FIXTURES[name]
    folder = os.path.join(out_root, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    model = base_model(arch, seed)
    rng = np.random.default_rng(seed)
    qc = pack(model, folder, rng, refs)
    write_config(model, folder, qc)
    copy_tokenizer(arch, folder)

    # The reference library's reading of the checkpoint: GPTQModel's dequantizer (a float32 folder);
    # for AWQ, AutoAWQ's own dequantize_gemm (GPTQModel's AWQ path does not undo AutoAWQ's nibble
    # interleave, so it does not read AutoAWQ GEMM checkpoints as AutoAWQ and vLLM do).
    hashes = {}
    if name.startswith("awq"):
        from safetensors import safe_open
        with safe_open(os.path.join(folder, "model.safetensors"), framework="pt") as f:
            for module, lin in linear_modules(model):
                w = refs[3].dequantize_gemm(f.get_tensor(module + ".qweight"), f.get_tensor(module + ".qzeros"),
                                            f.get_tensor(module + ".scales"), 4, qc["group_size"])
                # AutoAWQ computes in float16: its result is the exact s * (q - z) rounded to float16.
                assert torch.equal(w.t().float(), lin.weight.half().float()), f"{name}: {module}: AutoAWQ disagrees"
                hashes[module] = fnv1a64(lin.weight.detach().float().contiguous().numpy().tobytes())
    elif name.startswith("ct_"):
        # compressed-tensors' own decompress (its unpacking and dequantize), given float32 scales
        # so that its arithmetic is exact rather than rounded to the scales' float16.
        from safetensors import safe_open
        compressor, scheme = qc["_compressor"], qc["_scheme"]
        with safe_open(os.path.join(folder, "model.safetensors"), framework="pt") as f:
            for module, lin in linear_modules(model):
                state = {k[len(module) + 1:]: f.get_tensor(k) for k in f.keys() if k.startswith(module + ".")}
                state["weight_scale"] = state["weight_scale"].float()
                w = compressor.decompress(state, scheme)["weight"].float()
                assert torch.equal(w, lin.weight.float()), f"{name}: {module}: compressed-tensors disagrees"
                hashes[module] = fnv1a64(w.contiguous().numpy().tobytes())
    else:
        with tempfile.TemporaryDirectory() as tmp:
            deq = os.path.join(tmp, "dequantized")
            refs[2].dequantize_model(folder, deq, target_dtype=torch.float32)
            weights = {k: v for f in os.listdir(deq) if f.endswith(".safetensors")
                       for k, v in load_file(os.path.join(deq, f)).items()}
            for module, lin in linear_modules(model):
                w = weights[module + ".weight"].float().contiguous()
                assert torch.equal(w, lin.weight.float()), f"{name}: {module}: the dequantizer disagrees with s * (q - z)"
                hashes[module] = fnv1a64(w.numpy().tobytes())
    # transformers on those weights (the model object holds exactly them, as asserted above).
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    ref, margin = hf.reference_runs(model, hf_tok, seed, False, arch, model.config.vocab_size)
    max_logit = max(p["max_abs_logit"] for p in ref["prompts"])
    ref["seed"] = seed
    ref["min_greedy_margin"] = margin
    ref["dequantized_fnv1a64"] = hashes
    ref["quantization_config"] = {k: v for k, v in qc.items() if not k.startswith("_")}
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"))
        f.write("\n")
    print(f"{name}: max |logit| {max_logit:.3f}, min greedy margin {margin:.4f} "
          f"(ratio {margin / max_logit:.3f}), seed {seed}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.path.join(ROOT, "tests/data/prequant"))
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args()
    refs = import_reference_modules()
    for i, name in enumerate(FIXTURES):
        if args.only and name not in args.only:
            continue
        build(name, args.out, refs, 7000 + 100 * i)  # the table's order fixes each fixture's seed


if __name__ == "__main__":
    main()
