#!/usr/bin/env python3
"""A real-size pre-quantized checkpoint, end to end (bench, not CI): Qwen2.5-Coder-0.5B-Instruct's
GGUF (Q4_K/Q5_0, from scripts/fetch_bench_models.sh) read by transformers into float32, every layer
linear quantized round-to-nearest (GPTQ's Quantizer grid) and packed by AutoGPTQ's own
QuantLinear.pack into a GPTQ checkpoint folder (4-bit, groups of 128, symmetric, v1 zeros: what
most GPTQ uploads are); beside it the same weights dequantized (float32, s * (q - z) exactly) as a
plain folder. Then:
  - transformers' perplexity of the dequantized model on CHUNKS x CTX tokens of the eval text
    (llama-perplexity's scoring: the second half of each chunk), printed;
  - the folders' paths, for `kestrel perplexity` / `kestrel eval` / `kestrel bench` (see
    docs/QUANTIZATION.md for the commands and the figures).

Needs the venv of scripts/gen_prequant_fixtures.py plus gguf==0.17.1 (transformers' GGUF reader).
  /tmp/hfvenv/bin/python bench/prequant_real.py GGUF EVAL_TEXT OUT_DIR [--chunks 8] [--ctx 512]
"""

import argparse
import json
import math
import os
import shutil
import sys

import torch
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_prequant_fixtures as fx  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("gguf")
    p.add_argument("text")
    p.add_argument("out")
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--ctx", type=int, default=512)
    p.add_argument("--group", type=int, default=128)
    a = p.parse_args()
    QuantLinear = fx.import_reference_modules()[0]
    torch.set_num_threads(2)
    tok, model = fx.load_gguf(a.gguf)
    gptq_dir, f32_dir = os.path.join(a.out, "gptq"), os.path.join(a.out, "dequantized")
    for d in (gptq_dir, f32_dir):
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
    tensors, names = {}, []
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(model.model.embed_tokens.weight.half().float())
        for name, lin in fx.linear_modules(model):
            out_f, in_f = lin.weight.shape
            g_idx = torch.arange(in_f, dtype=torch.int32) // a.group
            groups = [torch.arange(g * a.group, (g + 1) * a.group) for g in range(in_f // a.group)]
            scales, zeros = fx.rtn_params(lin.weight, 4, groups, True)
            lin.weight.copy_(fx.fake_quantize(lin.weight, scales, zeros, g_idx.long(), 4))
            ql = QuantLinear(4, a.group, in_f, out_f, lin.bias is not None, weight_dtype=torch.float32)
            ql.pack(lin, scales, zeros, g_idx)
            tensors[name + ".qweight"] = ql.qweight.contiguous()
            tensors[name + ".qzeros"] = ql.qzeros.contiguous()
            tensors[name + ".scales"] = ql.scales.half().contiguous()
            tensors[name + ".g_idx"] = ql.g_idx.to(torch.int32).contiguous()
            names.append(name)
    floats = fx.float_tensors(model, names)
    tensors.update(floats)
    save_file(tensors, os.path.join(gptq_dir, "model.safetensors"), metadata={"format": "pt"})
    qc = {"quant_method": "gptq", "bits": 4, "group_size": a.group, "desc_act": False, "sym": True,
          "checkpoint_format": "gptq"}
    fx.write_config(model, gptq_dir, qc)
    # The dequantized twin: every weight float32 except the float16 embedding (as in the checkpoint).
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    state["model.embed_tokens.weight"] = state["model.embed_tokens.weight"].half()
    save_file(state, os.path.join(f32_dir, "model.safetensors"), metadata={"format": "pt"})
    model.config.save_pretrained(f32_dir)
    for d in (gptq_dir, f32_dir):
        tok.save_pretrained(d)

    # transformers' perplexity, llama-perplexity's way: chunks of ctx tokens, the second half scored.
    with open(a.text, encoding="utf-8", newline="") as f:  # as the bytes are: no newline translation
        ids = tok(f.read(), add_special_tokens=False)["input_ids"]
    nll, count = 0.0, 0
    with torch.no_grad():
        for c in range(a.chunks):
            chunk = ids[c * a.ctx:(c + 1) * a.ctx]
            if len(chunk) < a.ctx:
                break
            logits = model(torch.tensor([chunk])).logits[0].double()
            logp = torch.log_softmax(logits, dim=-1)
            for i in range(a.ctx // 2, a.ctx - 1):
                nll -= float(logp[i, chunk[i + 1]])
                count += 1
    print(json.dumps({"gptq": gptq_dir, "dequantized": f32_dir, "chunks": a.chunks, "ctx": a.ctx,
                      "transformers_ppl": math.exp(nll / count), "tokens_scored": count}))


if __name__ == "__main__":
    main()
