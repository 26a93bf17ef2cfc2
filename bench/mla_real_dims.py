#!/usr/bin/env python3
"""DeepSeek-V2-Lite's attention at its real sizes, against transformers (run by hand; ~1 GB).

The committed fixtures (tests/data/arch/deepseek2*) are tiny: a latent key of 32 values. This
writes a 2-layer model with DeepSeek-V2-Lite's attention exactly (hidden 2048, 16 heads,
kv_lora_rank 512, keys 128 + 64 rotary, values 128, YaRN factor 40 over 4096 positions with
mscale = mscale_all_dim = 0.707), a dense first layer (intermediate 10944) and a MoE layer of 16
experts (the real model has 64) of 1408, 6 per token, 2 shared, through the same pipeline as the
fixtures (scripts/gen_arch_fixtures.py: transformers reference with DeepSeek's softmax mscale^2,
llama.cpp's convert_hf_to_gguf.py), into OUT/deepseek2_real_dims/{model.gguf, reference.json}.
The greedy-margin and router-gap seed checks are off (one seed; a router near-tie would show as a
logits mismatch, not pass silently). Then

  KESTREL_MLA_REAL_DIMS=OUT/deepseek2_real_dims build/debug/tests/mla_fixtures_test \\
      --gtest_filter='*RealDimensions*'

compares Kestrel's batch logits and greedy tokens with transformers' at these sizes (the cache's
latent head is 576 values: the attention kernels' long-head loops run, which 32 does not reach).
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import gen_arch_fixtures as gaf  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("out")
    p.add_argument("--llama-cpp", default=gaf.DEFAULT_LLAMA_CPP)
    p.add_argument("--experts", type=int, default=16)
    a = p.parse_args()
    gaf.torch.set_num_threads(2)
    gaf.MIN_MARGIN_RATIO = 0.0
    gaf.MIN_ROUTER_GAP = 0.0
    gaf.MAX_FIXTURE_BYTES = 1 << 40
    shared = os.path.join(ROOT, "..", "shared", "models", "text")
    lines = gaf.read_corpus([os.path.join(shared, "tinystories_val.txt"), os.path.join(shared, "wikitext-2-test.txt")])
    tok = gaf.gpt2_bpe(lines, 380, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    eos = tok.token_to_id("<|endoftext|>")
    chat = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    bpe = gaf.BpeTok(tok, {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": False}, chat)
    yarn = dict(type="yarn", factor=40.0, original_max_position_embeddings=4096, beta_fast=32.0, beta_slow=1.0,
                mscale=0.707, mscale_all_dim=0.707)
    cfg = gaf.transformers.DeepseekV2Config(
        vocab_size=bpe.vocab_size(), hidden_size=2048, intermediate_size=10944, moe_intermediate_size=1408,
        num_hidden_layers=2, num_attention_heads=16, num_key_value_heads=16, n_shared_experts=2,
        n_routed_experts=a.experts, num_experts_per_tok=6, routed_scaling_factor=1.0, kv_lora_rank=512,
        q_lora_rank=None, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128, topk_method="greedy",
        n_group=1, topk_group=1, norm_topk_prob=False, first_k_dense_replace=1, max_position_embeddings=163840,
        rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=yarn, attention_bias=False, tie_word_embeddings=False,
        bos_token_id=eos, eos_token_id=eos, pad_token_id=None, architectures=["DeepseekV2ForCausalLM"])
    spec = dict(name="deepseek2_real_dims", cls=gaf.transformers.DeepseekV2ForCausalLM, config=cfg, tok=bpe, seed=7,
                top_k=6, patch=gaf.deepseek_yarn_softmax_scale)
    os.makedirs(a.out, exist_ok=True)
    import tempfile
    with tempfile.TemporaryDirectory(dir=a.out) as work:
        ok, why = gaf.build_once(spec, spec["seed"], a.out, a.llama_cpp, work)
    if not ok:
        raise SystemExit(why)


if __name__ == "__main__":
    main()
