#!/usr/bin/env python3
"""AutoAWQ itself on a real model, as the reference for `kestrel quantize --method awq` (bench, not
CI): Qwen2.5-Coder-0.5B-Instruct's GGUF (Q4_K/Q5_0, scripts/fetch_bench_models.sh) read by
transformers into float32, then three folders:
  base/  the float32 model (the base every candidate is measured against);
  awq/   AutoAWQ 0.2.9's own AwqQuantizer (scale search, clipping, WQLinear_GEMM packing; 4-bit,
         groups of GROUP, zero point) over CHUNKS x CTX calibration tokens (with --no-clip:
         awq-noclip/, its scale search alone: 15 min on 2 cores for the 0.5B, where the clipping
         search takes about 11 min per layer on the CPU);
  rtn/   the same packing of plain round-to-nearest (AutoAWQ's pseudo_quantize_tensor, no scales,
         no clipping): the RTN row that AWQ's ratio is taken against.
Every other tensor stays float32 in all three, so the candidates differ from the base only in the
layer matrices. Kestrel loads awq/ and rtn/ as INT4_ZP_G<GROUP> (src/loader/hf_quantized.cpp); the
figures come from `kestrel eval base awq` and `kestrel eval base rtn` (docs/QUANTIZATION.md).

Needs the venv of scripts/gen_prequant_fixtures.py plus gguf==0.17.1 (transformers' GGUF reader),
and what the modules imported here import in turn: pypcre==0.6.4 logbar==0.4.15 device-smi==0.5.7
threadpoolctl==3.8.0 (gptqmodel's utils) and datasets==4.0.0 (AutoAWQ's calib_data).
  /tmp/hfvenv/bin/python bench/awq_reference.py GGUF CALIB_TEXT OUT_DIR [--chunks 8] [--ctx 512] [--no-clip]
"""

import argparse
import importlib
import os
import shutil
import sys
import time
import types

import torch
import transformers
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_prequant_fixtures as fx  # noqa: E402


def import_autoawq():
    """AutoAWQ's quantizer and its Qwen2 layer map, without its package __init__ (which needs an
    older transformers): the names it imports from transformers 4.57 that moved are aliased."""
    fx.import_reference_modules()
    import transformers.activations as act
    if not hasattr(act, "PytorchGELUTanh"):
        act.PytorchGELUTanh = act.GELUTanh
    site = os.path.dirname(os.path.dirname(transformers.__file__))
    for pkg in ["awq.models", "awq.quantize", "awq.utils"]:
        m = types.ModuleType(pkg)
        m.__path__ = [os.path.join(site, *pkg.split("."))]
        m.__spec__ = importlib.machinery.ModuleSpec(pkg, None, is_package=True)
        m.__spec__.submodule_search_locations = m.__path__
        sys.modules[pkg] = m
    quantizer = importlib.import_module("awq.quantize.quantizer")
    qwen2 = importlib.import_module("awq.models.qwen2")
    module = importlib.import_module("awq.utils.module")
    # transformers 4.57's Qwen2Model reads decoder_layer.attention_type, which AutoAWQ's Catcher
    # (wrapping layer 0 to capture its inputs) does not forward: every Qwen2 layer here is full attention.
    getattr_ = torch.nn.Module.__getattr__

    def module_getattr(self, name):
        if name == "attention_type" and type(self).__name__ == "Catcher":
            return "full_attention"
        return getattr_(self, name)
    torch.nn.Module.__getattr__ = module_getattr
    # AwqQuantizer._compute_best_scale keeps the layers' weights to restore after each grid point as
    # {k: v.cpu()}: on a GPU a copy, on the CPU the same tensors, which the grid point then scales in
    # place (fc.weight.mul_), so every "restore" keeps the previous point's scaling and the weights
    # end up multiplied by the product of all 20 grid points' scales. Within that method, .cpu() of
    # a CPU tensor copies, as it does from a GPU.
    cpu_ = torch.Tensor.cpu

    def copying_cpu(t, *args, **kwargs):
        return t.detach().clone() if t.device.type == "cpu" else cpu_(t, *args, **kwargs)
    search = quantizer.AwqQuantizer._compute_best_scale

    def compute_best_scale(self, *args, **kwargs):
        torch.Tensor.cpu = copying_cpu
        try:
            return search(self, *args, **kwargs)
        finally:
            torch.Tensor.cpu = cpu_
    quantizer.AwqQuantizer._compute_best_scale = compute_best_scale
    return quantizer.AwqQuantizer, qwen2.Qwen2AWQForCausalLM, module.get_named_linears


def save(model, tok, folder, quantization_config=None):
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    tied = model.config.tie_word_embeddings
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if not (tied and k == "lm_head.weight")}
    save_file(state, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    if quantization_config is None:
        model.config.save_pretrained(folder)
    else:
        fx.write_config(model, folder, quantization_config)
    tok.save_pretrained(folder)


class AwqModel:
    """What AwqQuantizer asks of its model wrapper: AutoAWQ's Qwen2 layer map and model type."""

    def __init__(self, layer_map):
        self.model_type = "qwen2"
        self.map = layer_map

    def get_model_layers(self, model):
        return self.map.get_model_layers(model)

    def move_embed(self, model, device):
        self.map.move_embed(model, device)

    def get_layers_for_scaling(self, module, input_feat, module_kwargs):
        return self.map.get_layers_for_scaling(module, input_feat, module_kwargs)

    def get_act_for_scaling(self, module):
        return self.map.get_act_for_scaling(module)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("gguf")
    p.add_argument("calib")
    p.add_argument("out")
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--group", type=int, default=128)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--awq-only", action="store_true", help="write only awq/ (base/ and rtn/ exist)")
    p.add_argument("--no-clip", action="store_true",
                   help="AutoAWQ's scale search only (apply_clip=False), written to awq-noclip/")
    a = p.parse_args()
    AwqQuantizer, layer_map, get_named_linears = import_autoawq()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    tok, model = fx.load_gguf(a.gguf)
    if not a.awq_only:
        save(model, tok, os.path.join(a.out, "base"))
    with open(a.calib, "rb") as f:  # bytes: no newline translation
        text = f.read().decode("utf-8")
    ids = tok(text, add_special_tokens=False)["input_ids"]
    need = a.chunks * a.ctx
    if len(ids) < need:
        sys.exit(f"{a.calib}: {len(ids)} tokens, {need} needed for {a.chunks} x {a.ctx}")
    samples = [ids[i * a.ctx:(i + 1) * a.ctx] for i in range(a.chunks)]
    qc = {"quant_method": "awq", "bits": 4, "group_size": a.group, "zero_point": True, "version": "gemm"}

    wrapper = AwqModel(layer_map)
    start = time.time()
    quantizer = AwqQuantizer(wrapper, model, tok, 4, a.group, True, "gemm", samples, None, "text", True,
                             apply_clip=not a.no_clip, max_calib_samples=a.chunks, max_calib_seq_len=a.ctx)
    # transformers 4.57's prepare_inputs_for_generation hands every layer a DynamicCache: each of the
    # search's forward passes would append its keys and values to it, so later passes attend to stale
    # copies (AutoAWQ 0.2.9 targets older transformers, which passed none). No cache, as intended.
    quantizer.module_kwargs.pop("past_key_values", None)
    quantizer.module_kwargs["use_cache"] = False
    quantizer.quantize()
    print(f"AutoAWQ: {time.time() - start:.0f} s for {len(quantizer.modules)} layers", flush=True)
    awq_dir = "awq-noclip" if a.no_clip else "awq"
    save(model, tok, os.path.join(a.out, awq_dir), qc)

    if a.awq_only:
        return
    # RTN: the same packing (AwqQuantizer._apply_quant: pseudo_quantize_tensor in float16, then
    # WQLinear_GEMM.from_linear) of the unscaled, unclipped weights.
    _, model = fx.load_gguf(a.gguf)
    rtn = AwqQuantizer.__new__(AwqQuantizer)
    rtn.w_bit, rtn.group_size, rtn.zero_point, rtn.version = 4, a.group, True, "gemm"
    for layer in layer_map.get_model_layers(model):
        rtn._apply_quant(layer, get_named_linears(layer))
    save(model, tok, os.path.join(a.out, "rtn"), qc)
    print(f"wrote {a.out}/base, {awq_dir}, rtn")


if __name__ == "__main__":
    main()
