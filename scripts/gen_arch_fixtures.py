#!/usr/bin/env python3
"""Writes the GGUF architecture fixtures under tests/data/arch/ (run by hand, never in CI).

Each fixture is a tiny random-weight model of one architecture, built with Hugging Face
transformers, converted to GGUF (f32) by llama.cpp's own convert_hf_to_gguf.py, and written as
tests/data/arch/<name>/{model.gguf, reference.json, config.json}. reference.json is what
transformers computes for it, in the format of scripts/gen_hf_fixtures.py (logits of the last
positions of each prompt as flattened rows x vocab, greedy continuations, tokenizer ids);
config.json is the HF config the GGUF was converted from (provenance only).

  name               class                 what it exercises
  gemma2             Gemma2ForCausalLM     Gemma norms (1 + w, the converter adds the 1), pre- and
                                           post-norms, GeLU-tanh, embedding scale sqrt(hidden),
                                           attn_logit_softcapping 2, final_logit_softcapping 1 (the
                                           uncapped logits reach about 1, so tanh bends them),
                                           query_pre_attn_scalar = head_dim 16 (the GGUF has no key for
                                           it: llama.cpp assumes the head size), sliding_window 8
                                           on layers 0 and 2 (of 4), tied embeddings, SentencePiece
                                           tokenizer.model (no dummy prefix)
  phi3               Phi3ForCausalLM       fused qkv_proj and gate_up_proj, no rope_scaling,
                                           SentencePiece tokenizer.model (dummy prefix), GQA
  phi3_longrope      Phi3ForCausalLM       as phi3 plus LongRoPE (rope_scaling longrope: short and long
                                           factors, original context 16 of 256) and partial rotary
                                           0.75 (Phi-3.5 / Phi-4-mini); see longrope_reference_runs
  internlm2          LlamaForCausalLM      re-saved as InternLM2ForCausalLM (fused wqkv grouped per KV
                                           head, InternLM2's tensor names; see export_internlm2), GQA,
                                           SentencePiece tokenizer.model (dummy prefix)
  granite            GraniteForCausalLM    embedding_multiplier 12, residual_multiplier 0.22,
                                           attention_multiplier 0.125 (not 1/sqrt(16)),
                                           logits_scaling 8, GQA
  olmo2              Olmo2ForCausalLM      post-norms only (no pre-norms), q_norm/k_norm RMSNorm over
                                           the whole q/k projection (not per head), GQA
  smollm3            SmolLM3ForCausalLM    no_rope_layer_interval 4 (layer 3 of 4 has no RoPE), GQA,
                                           tied embeddings
  starcoder2         Starcoder2ForCausalLM biases on every linear, non-gated GELU-tanh MLP, LayerNorm
                                           with bias, no sliding window (the converter does not write
                                           it to the GGUF, see below), GQA
  stablelm           StableLmForCausalLM   partial_rotary_factor 0.25, q/k/v biases, LayerNorm with
                                           bias, sequential residual
  stablelm_parallel  StableLmForCausalLM   as stablelm plus use_parallel_residual (attention and MLP
                                           both off input_layernorm). Not qk_layernorm: this
                                           converter cannot convert it (StableLMModel.modify_tensors
                                           "return"s the generator of the stacked per-head norms
                                           inside a generator, so they are never written and it
                                           fails with "Unprocessed norms").
  cohere             CohereForCausalLM     parallel attention + MLP off one LayerNorm (no bias),
                                           logit_scale 0.25, interleaved RoPE pairs, tied embeddings
  cohere_qknorm      CohereForCausalLM     as cohere plus use_qk_norm (per-head LayerNorm)
  qwen3_moe          Qwen3MoeForCausalLM   4 experts top-2, norm_topk_prob True, per-head q/k norm
  mixtral            MixtralForCausalLM    4 experts top-2, no sliding window
  qwen2_moe          Qwen2MoeForCausalLM   4 experts top-2, norm_topk_prob False, shared expert with a
                                           sigmoid gate, q/k/v biases
  olmoe              OlmoeForCausalLM      4 experts top-2, norm_topk_prob False, q/k RMSNorm over the
                                           whole projection

  qwen2_yarn         Qwen2ForCausalLM      YaRN factor 4 over an original context of 64 (no mscale)
  deepseek2_lite     DeepseekV2ForCausalLM latent attention (kv_lora_rank 24, keys 16 + 8 rotary,
                                           values 12), queries by q_proj; layer 0 dense, then 4
                                           experts top-2 with 2 ungated shared experts, routed
                                           weights * 1.5 not renormalized
  deepseek2          DeepseekV2ForCausalLM as deepseek2_lite with queries through a rank-20 latent
  deepseek2_yarn     DeepseekV2ForCausalLM as deepseek2_lite with YaRN factor 8 over 64, mscale =
                                           mscale_all_dim 0.707 (DeepSeek's softmax scale * mscale^2
                                           patched into the reference: transformers 4.57 omits it)
  deepseek2_groups   DeepseekV2ForCausalLM as deepseek2 with 8 experts top-3 from the best 2 of 4
                                           groups (group_limited_greedy: a group's best softmax score)
  deepseek3          DeepseekV3ForCausalLM sigmoid router scores plus a selection bias, the best 2 of
                                           4 groups by their two best scores, top-3 renormalized x 2.5

MoE fixtures: with these weight scales about 1% of routed tokens have a k-th/(k+1)-th router
probability gap under 1e-3 and a reference run routes a few hundred tokens per layer, so a gap
threshold of 1e-3 rejected every seed; 1e-4 still leaves 100x over float32 rounding.

Skipped: every model that needs trust_remote_code (no code from the Hub is run here) and whose
math transformers does not have under another name (InternLM2's is Llama's: see internlm2).

Weights are seeded and drawn at a scale that keeps activations O(1) (matrices std 1/sqrt(fan_in),
embeddings std 1 (smaller where an embedding multiplier or tied head needs it), norms 1 +- 0.1 or
Gemma's 0 +- 0.1, biases std 0.1, MoE routers std 2/sqrt(fan_in)). As in gen_hf_fixtures.py a seed
is kept only if every greedy step's top-1/top-2 logit gap is at least MIN_MARGIN_RATIO (2e-4) of
the largest |logit|; for MoE models also only if, at every token of every reference run in every
MoE layer, the router probabilities of the k-th and (k+1)-th expert differ by at least
MIN_ROUTER_GAP (1e-4, 100x the float32 rounding of a probability) (recorded with forward hooks on the routers), so that rounding cannot swap
an expert. Else the next seed is tried. Greedy runs are 16 tokens (plus 64, "greedy_long", for
sliding-window models).

Tokenizers (trained on the first 200 KB of ../shared/models/text/tinystories_val.txt and
wikitext-2-test.txt, deterministic for the same text):
  * gemma2 and phi3: their converter classes read a SentencePiece tokenizer.model, so one is
    trained with the sentencepiece library (BPE, byte fallback, identity normalisation, no
    whitespace folding; Gemma's <pad> <eos> <bos> <unk> ids 0-3 without a dummy prefix, Phi-3's
    <unk> <s> </s> ids 0-2 with one). The reference ids come from transformers' slow
    GemmaTokenizer / LlamaTokenizer (legacy=False, as Phi-3 ships) on that same .model, so they
    use exactly the vocabulary the GGUF holds (tokenizer.ggml.model "llama").
  * all others: a byte-level BPE with GPT-2's pre-tokenizer (ByteLevel with its built-in GPT-2
    regex), saved as tokenizer.json (tokenizer.ggml.model "gpt2"). convert_hf_to_gguf.py
    identifies a BPE pre-tokenizer by hashing its output on a fixed text, which a freshly
    trained vocabulary can never match, so the converter is run through a small wrapper
    (convert(), below) that imports it and replaces TextModel.get_vocab_base_pre with a function
    that calls the original and, only where that raises "not recognized", returns "gpt-2". Only
    the tokenizer.ggml.pre string is affected: tensors and every other key are the converter's.
    cohere and mixtral add a BOS (<|endoftext|>) through a TemplateProcessing post-processor; the
    others add none.

Notes on what the converter writes (see /tmp/arch_gguf_summary.md when generated by --describe):
  * starcoder2: StarCoder2Model writes no sliding_window key (llama.cpp ignores the window), so a
    GGUF cannot hold one: the fixture has none (real StarCoder2 models' 4096-token window is lost
    in conversion; llama.cpp runs them with full attention).
  * smollm3: no key for the no-RoPE layers; llama.cpp hard-codes every 4th layer, which is what
    no_rope_layer_interval 4 gives here.
  * gemma2: no key for which layers slide; llama.cpp hard-codes even layers, as transformers'
    default layer_types.

Pinned versions (a venv under /tmp; torch from PyPI, CPU use only):
  python 3.11.7, torch 2.15.0, transformers 4.57.6, tokenizers 0.22.2, safetensors 0.8.0,
  numpy 2.4.6, sentencepiece 0.2.3, protobuf 7.36.2; the converter and gguf-py are llama.cpp's as
  vendored in llama-cpp-python 0.3.36 (its own gguf-py, not PyPI's gguf).

  python3 -m venv /tmp/hfvenv
  /tmp/hfvenv/bin/pip install torch==2.15.0 transformers==4.57.6 tokenizers==0.22.2 \
      safetensors==0.8.0 numpy==2.4.6 sentencepiece==0.2.3 protobuf==7.36.2
  (unpack the llama-cpp-python 0.3.36 sdist under /tmp)
  nice -n 10 /tmp/hfvenv/bin/python scripts/gen_arch_fixtures.py \
      --llama-cpp /tmp/llama_cpp_python-0.3.36/vendor/llama.cpp [--only gemma2 phi3 ...]
  /tmp/hfvenv/bin/python scripts/gen_arch_fixtures.py --llama-cpp ... --describe > summary.md
"""

import argparse
import io
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch
import transformers
import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_hf_fixtures import (GREEDY_TOKENS, LOGIT_POSITIONS, MIN_MARGIN_RATIO, PROMPT_TEXTS, TOKENIZER_STRINGS,  # noqa: E402
                             floats, greedy, read_corpus, reference_runs,
                             save_tokenizer)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_LLAMA_CPP = "/tmp/llama_cpp_python-0.3.36/vendor/llama.cpp"
MIN_ROUTER_GAP = 1e-4
MAX_FIXTURE_BYTES = 1_600_000

# Runs convert_hf_to_gguf.py's main with TextModel.get_vocab_base_pre falling back to "gpt-2"
# for an unrecognised BPE pre-tokenizer hash; nothing else is changed.
CONVERT_WRAPPER = r"""
import sys
llama_cpp = sys.argv[1]
sys.path[:0] = [llama_cpp, llama_cpp + "/gguf-py"]
import conversion.base as base
original = base.TextModel.get_vocab_base_pre
def get_vocab_base_pre(self, tokenizer):
    try:
        return original(self, tokenizer)
    except NotImplementedError:
        return "gpt-2"   # the fixtures' byte-level BPE uses GPT-2's pre-tokenizer
base.TextModel.get_vocab_base_pre = get_vocab_base_pre
import convert_hf_to_gguf
sys.argv = ["convert_hf_to_gguf.py"] + sys.argv[2:]
convert_hf_to_gguf.main()
"""


# ---------------------------------------------------------------------------------------------
# Tokenizers

def gpt2_bpe(lines, vocab_size, specials, bos=None):
    """Byte-level BPE with GPT-2's pre-tokenizer (ByteLevel, use_regex=True, no prefix space)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    tok.add_special_tokens(specials)
    if bos is None:
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
    else:
        bos_id = tok.token_to_id(bos)
        tok.post_processor = processors.Sequence([
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos}:1 $B:1",
                                          special_tokens=[(bos, bos_id)]),
        ])
    return tok


def train_sentencepiece(lines, vocab_size, dummy_prefix, ids, user_defined):
    """A SentencePiece BPE model (bytes as <0xNN> fallback pieces), as bytes of tokenizer.model."""
    import sentencepiece as spm
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=out, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, character_coverage=0.9995, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=dummy_prefix, split_digits=True,
        allow_whitespace_only_pieces=True, user_defined_symbols=user_defined, num_threads=1,
        minloglevel=2, **ids)
    return out.getvalue()


class BpeTok:
    """A trained tokenizers.Tokenizer, saved as tokenizer.json (+ tokenizer_config.json)."""

    def __init__(self, tok, config, special_text):
        self.tok, self.config, self.special_text = tok, config, special_text

    def vocab_size(self):
        return self.tok.get_vocab_size()

    def save(self, folder):
        save_tokenizer(self.tok, folder, self.config)

    def load(self, folder):
        return transformers.AutoTokenizer.from_pretrained(folder)


class SpmTok:
    """A SentencePiece tokenizer.model with a slow transformers tokenizer class around it."""

    def __init__(self, model_bytes, cls, kwargs, special_text, added):
        self.model_bytes, self.cls, self.kwargs, self.special_text = model_bytes, cls, kwargs, special_text
        # The chat markers, declared as added special tokens as the real checkpoints do: else
        # tokenizer_config.json does not list them and the converter writes them as NORMAL
        # tokens, which llama.cpp (and Kestrel) never match in text.
        self.added = added

    def vocab_size(self):
        import sentencepiece as spm
        return spm.SentencePieceProcessor(model_proto=self.model_bytes).vocab_size()

    def save(self, folder):
        path = os.path.join(folder, "spm_source.model")
        with open(path, "wb") as f:
            f.write(self.model_bytes)
        tok = self.cls(vocab_file=path, **self.kwargs)
        tok.add_special_tokens({"additional_special_tokens": self.added})
        tok.save_pretrained(folder)
        os.remove(path)

    def load(self, folder):
        tok = transformers.AutoTokenizer.from_pretrained(folder, use_fast=False)
        assert not tok.is_fast
        return tok


# ---------------------------------------------------------------------------------------------
# InternLM2: its modelling code lives on the Hub (trust_remote_code, which is not run here), but
# its math is Llama's (RMSNorm, RoPE with rotate_half, SwiGLU, no biases) with other tensor names
# and a fused wqkv. So the fixture is a LlamaForCausalLM (the transformers reference) re-saved in
# InternLM2's checkpoint layout for the converter (InternLM2Model in llama.cpp's conversion/).

def export_internlm2(model, hf):
    """Rewrites the Llama checkpoint in hf as an InternLM2 one (config.json, model.safetensors)."""
    from safetensors.torch import save_file
    c = model.config
    n_head, n_kv, hd = c.num_attention_heads, c.num_key_value_heads, c.hidden_size // c.num_attention_heads
    q_per_kv = n_head // n_kv
    sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    out = {"model.tok_embeddings.weight": sd["model.embed_tokens.weight"], "model.norm.weight": sd["model.norm.weight"],
           "output.weight": sd["lm_head.weight"]}
    for i in range(c.num_hidden_layers):
        src, dst = f"model.layers.{i}.", f"model.layers.{i}."
        q = sd[src + "self_attn.q_proj.weight"].reshape(n_kv, q_per_kv, hd, c.hidden_size)
        k = sd[src + "self_attn.k_proj.weight"].reshape(n_kv, 1, hd, c.hidden_size)
        v = sd[src + "self_attn.v_proj.weight"].reshape(n_kv, 1, hd, c.hidden_size)
        # wqkv rows: per KV head, its q_per_kv query heads, then its key head, then its value head.
        out[dst + "attention.wqkv.weight"] = torch.cat([q, k, v], dim=1).reshape(-1, c.hidden_size).contiguous()
        out[dst + "attention.wo.weight"] = sd[src + "self_attn.o_proj.weight"]
        out[dst + "feed_forward.w1.weight"] = sd[src + "mlp.gate_proj.weight"]
        out[dst + "feed_forward.w3.weight"] = sd[src + "mlp.up_proj.weight"]
        out[dst + "feed_forward.w2.weight"] = sd[src + "mlp.down_proj.weight"]
        out[dst + "attention_norm.weight"] = sd[src + "input_layernorm.weight"]
        out[dst + "ffn_norm.weight"] = sd[src + "post_attention_layernorm.weight"]
    for name in os.listdir(hf):
        if name.endswith(".safetensors") or name == "model.safetensors.index.json":
            os.remove(os.path.join(hf, name))
    save_file({k: v.contiguous() for k, v in out.items()}, os.path.join(hf, "model.safetensors"), metadata={"format": "pt"})
    config = {"architectures": ["InternLM2ForCausalLM"], "model_type": "internlm2", "vocab_size": c.vocab_size,
              "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
              "num_hidden_layers": c.num_hidden_layers, "num_attention_heads": n_head, "num_key_value_heads": n_kv,
              "hidden_act": "silu", "max_position_embeddings": c.max_position_embeddings,
              "rms_norm_eps": c.rms_norm_eps, "rope_theta": c.rope_theta, "rope_scaling": None, "bias": False,
              "tie_word_embeddings": False, "bos_token_id": c.bos_token_id, "eos_token_id": c.eos_token_id,
              "pad_token_id": 0, "torch_dtype": "float32"}
    with open(os.path.join(hf, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


# ---------------------------------------------------------------------------------------------
# Weights

def randomize(model, seed, gemma, embed_std, router_scale=2.0):
    """Seeded weights at O(1) activation scale: matrices N(0, 1/fan_in), embeddings N(0, embed_std),
    biases N(0, 0.1), norm weights 1 +- 0.1 (Gemma stores w of (1 + w): 0 +- 0.1), norm biases
    N(0, 0.1), MoE routers (mlp.gate, shared_expert_gate) N(0, router_scale^2 / fan_in)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            path = name.split(".")
            is_norm = any("norm" in part for part in path[:-1])
            if name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif is_norm:
                base = 0.0 if gemma else 1.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(embed_std * torch.randn(p.shape, generator=g))
            elif name.endswith("mlp.gate.weight") or name.endswith("block_sparse_moe.gate.weight"):
                p.copy_(router_scale * torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))


class RouterWatch:
    """Forward hooks on every MoE router (an nn.Linear named *.mlp.gate, Mixtral's *.block_sparse_moe.gate,
    DeepSeek's gate modules): the smallest margin of a routing decision over all tokens seen, i.e.
    the gap between the k-th and (k+1)-th selection score of the experts a token may choose, and
    with group-limited routing also between the last chosen and the first unchosen group score.
    routing: dict(gating="softmax"|"sigmoid", n_group, topk_group, group_score="max"|"top2") for
    DeepSeek's routers; plain softmax top-k without it."""

    def __init__(self, model, k, routing=None):
        self.k, self.min_gap, self.calls, self.handles = k, float("inf"), 0, []
        self.routing = routing or dict(gating="softmax", n_group=1, topk_group=1, group_score="max")
        for name, mod in model.named_modules():
            if name.endswith("mlp.gate") or name.endswith("block_sparse_moe.gate"):
                self.handles.append(mod.register_forward_hook(self.hook))

    def hook(self, module, inputs, output):
        # DeepSeek's gates are not nn.Linear (they return the chosen experts): their logits are
        # recomputed from the input and weight.
        if isinstance(module, torch.nn.Linear):
            logits = output
        else:
            x = inputs[0].reshape(-1, module.weight.shape[-1]).float()
            logits = x @ module.weight.float().t()
        logits = logits.reshape(-1, logits.shape[-1]).float()
        r = self.routing
        scores = torch.sigmoid(logits) if r["gating"] == "sigmoid" else torch.softmax(logits, dim=-1)
        bias = getattr(module, "e_score_correction_bias", None)
        selection = scores + bias.float() if bias is not None else scores
        gaps = []
        if r["n_group"] > 1 and r["topk_group"] < r["n_group"]:
            grouped = selection.reshape(selection.shape[0], r["n_group"], -1)
            if r["group_score"] == "top2":
                group_scores = grouped.topk(2, dim=-1).values.sum(dim=-1)
            else:
                group_scores = grouped.max(dim=-1).values
            top = torch.topk(group_scores, r["topk_group"] + 1, dim=-1)
            gaps.append(float((top.values[:, -2] - top.values[:, -1]).min()))
            keep = torch.zeros_like(group_scores, dtype=torch.bool)
            keep.scatter_(1, top.indices[:, :r["topk_group"]], True)
            keep = keep.unsqueeze(-1).expand_as(grouped).reshape(selection.shape)
            selection = selection.masked_fill(~keep, float("-inf"))
        top = torch.topk(selection, self.k + 1, dim=-1).values
        gap = top[:, self.k - 1] - top[:, self.k]
        gaps.append(float(gap[torch.isfinite(gap)].min()) if bool(torch.isfinite(gap).any()) else float("inf"))
        self.min_gap = min([self.min_gap] + gaps)
        self.calls += 1


# ---------------------------------------------------------------------------------------------
# Conversion and checks

def convert(llama_cpp, hf_folder, out_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(llama_cpp, "gguf-py")
    cmd = [sys.executable, "-c", CONVERT_WRAPPER, llama_cpp, hf_folder, "--outtype", "f32",
           "--outfile", out_path]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        sys.stderr.write(res.stdout + res.stderr)
        raise SystemExit(f"convert_hf_to_gguf.py failed on {hf_folder}")
    return res.stderr


def gguf_reader(llama_cpp, path):
    gp = os.path.join(llama_cpp, "gguf-py")
    if gp not in sys.path:
        sys.path.insert(0, gp)
    import gguf
    assert os.path.realpath(os.path.dirname(gguf.__file__)).startswith(os.path.realpath(gp)), gguf.__file__
    return gguf, gguf.GGUFReader(path)


def field_value(gguf, field):
    t = field.types[0]
    if t == gguf.GGUFValueType.ARRAY:
        sub = field.types[-1]
        if sub == gguf.GGUFValueType.STRING:
            return [bytes(field.parts[i]).decode("utf-8", "replace") for i in field.data]
        return [field.parts[i].tolist()[0] for i in field.data]
    if t == gguf.GGUFValueType.STRING:
        return bytes(field.parts[field.data[0]]).decode("utf-8", "replace")
    return field.parts[field.data[0]].tolist()[0]


def check_gguf(llama_cpp, path, vocab_size):
    gguf, reader = gguf_reader(llama_cpp, path)
    tokens = field_value(gguf, reader.fields["tokenizer.ggml.tokens"])
    assert len(tokens) == vocab_size, (path, len(tokens), vocab_size)
    return [k for k in reader.fields]


# ---------------------------------------------------------------------------------------------
# Fixtures

LONGROPE_ORIGINAL = 16       # phi3_longrope's original_max_position_embeddings
LONGROPE_SHORT_GREEDY = 8    # short-context greedy runs stay within the original context


def longrope_reference_runs(model, hf_tok, seed, architecture, vocab_size):
    """reference_runs for a LongRoPE model. transformers picks the factors per forward by the
    sequence length (long ones past original_max_position_embeddings), llama.cpp once by the
    context size; the two agree on runs that never cross the original context, so:
    "prompts" (the generic tests, run at a context of 256) keep only the prompts longer than the
    original context (long factors from the first token), and "short_context" holds the prompts
    that stay within it, greedy runs included (short factors), for a run at context 16."""
    rng = np.random.default_rng(seed)
    long_prompts = [hf_tok.encode(t, add_special_tokens=True) for t in PROMPT_TEXTS]
    long_prompts = [p for p in long_prompts if len(p) > LONGROPE_ORIGINAL]
    long_prompts.append([int(x) for x in rng.integers(0, len(hf_tok), size=40)])
    assert len(long_prompts) >= 2, [len(p) for p in long_prompts]
    ref = {"architecture": architecture, "transformers": transformers.__version__, "torch": torch.__version__,
           "tokenizers": tokenizers.__version__, "vocab_size": vocab_size, "sliding_window": 0,
           "prompts": [], "tokenizer": []}
    min_margin = float("inf")
    with torch.no_grad():
        for prompt in long_prompts:
            logits = model(torch.tensor([prompt])).logits[0]
            first = len(prompt) - LOGIT_POSITIONS
            tokens, margin = greedy(model, prompt, GREEDY_TOKENS)
            min_margin = min(min_margin, margin)
            ref["prompts"].append({"ids": prompt, "logits_from": first, "logits": floats(logits[first:]),
                                   "max_abs_logit": float(logits.abs().max()), "greedy": tokens})
        short = []
        for text in ["Tom said", "The dog", "She ran home"]:
            prompt = hf_tok.encode(text, add_special_tokens=True)
            assert len(prompt) + LONGROPE_SHORT_GREEDY <= LONGROPE_ORIGINAL, (text, len(prompt))
            logits = model(torch.tensor([prompt])).logits[0]
            tokens, margin = greedy(model, prompt, LONGROPE_SHORT_GREEDY)
            min_margin = min(min_margin, margin)
            short.append({"ids": prompt, "logits_from": 0, "logits": floats(logits),
                          "max_abs_logit": float(logits.abs().max()), "greedy": tokens})
    ref["short_context"] = {"context": LONGROPE_ORIGINAL, "prompts": short}
    return ref, min_margin


def build(spec, out_root, llama_cpp, work):
    # MoE fixtures need many more tries: with a few hundred routed tokens per layer, a router
    # near-tie turns up in many seeds.
    for attempt in range(100 if spec.get("top_k") else 20):
        seed = spec["seed"] + 1000 * attempt
        ok, why = build_once(spec, seed, out_root, llama_cpp, work)
        if ok:
            return
        print(f"{spec['name']}: seed {seed}: {why}; next seed", flush=True)
    raise SystemExit(f"{spec['name']}: no seed passed the margin checks")


def build_once(spec, seed, out_root, llama_cpp, work):
    name, config, tok = spec["name"], spec["config"], spec["tok"]
    hf = os.path.join(work, name)   # the folder name becomes the GGUF's general.name
    shutil.rmtree(hf, ignore_errors=True)
    os.makedirs(hf)
    torch.manual_seed(seed)
    # transformers' own init is skipped (randomize sets every parameter): StableLM's _init_weights
    # fails on qk_layernorm's bias-free LayerNorms in 4.57 (kept although qk_layernorm is off).
    with transformers.modeling_utils.no_init_weights():
        model = spec["cls"](config)
    model.tie_weights()   # no_init_weights also skips the tying
    if config.tie_word_embeddings:
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    randomize(model, seed, spec.get("gemma", False), spec.get("embed_std", 1.0))
    if spec.get("prepare"):
        spec["prepare"](model, seed)
    model.save_pretrained(hf, safe_serialization=True)
    gen_cfg = os.path.join(hf, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)
    tok.save(hf)

    model = transformers.AutoModelForCausalLM.from_pretrained(hf, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    if spec.get("patch"):
        spec["patch"](model)
    hf_tok = tok.load(hf)
    vocab_size = model.config.vocab_size
    assert vocab_size == len(hf_tok) == tok.vocab_size(), (vocab_size, len(hf_tok), tok.vocab_size())
    sliding = spec.get("sliding", 0)
    k = spec.get("top_k", 0)
    watch = RouterWatch(model, k, spec.get("routing")) if k else None

    if spec.get("longrope"):
        ref, min_margin = longrope_reference_runs(model, hf_tok, seed, config.architectures[0], vocab_size)
    else:
        ref, min_margin = reference_runs(model, hf_tok, seed, sliding, config.architectures[0], vocab_size)
    max_logit = max(p["max_abs_logit"] for p in ref["prompts"])
    ratio = min_margin / max_logit
    if ratio < MIN_MARGIN_RATIO:
        return False, f"greedy margin ratio {ratio:.2e} too small"
    if watch is not None:
        assert watch.calls > 0, "no router hook fired"
        if watch.min_gap < MIN_ROUTER_GAP:
            return False, f"router top-{k} probability gap {watch.min_gap:.2e} too small"
    ref["seed"] = seed
    ref["min_greedy_margin"] = min_margin
    for text in TOKENIZER_STRINGS + [tok.special_text]:
        ref["tokenizer"].append({"text": text,
                                 "with_special": hf_tok.encode(text, add_special_tokens=True),
                                 "without_special": hf_tok.encode(text, add_special_tokens=False)})

    if spec.get("export"):
        spec["export"](model, hf)
    folder = os.path.join(out_root, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    convert(llama_cpp, hf, os.path.join(folder, "model.gguf"))
    keys = check_gguf(llama_cpp, os.path.join(folder, "model.gguf"), vocab_size)
    shutil.copy(os.path.join(hf, "config.json"), os.path.join(folder, "config.json"))
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"), ensure_ascii=False)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(folder, x)) for x in os.listdir(folder))
    assert size <= MAX_FIXTURE_BYTES, (name, size)
    extra = f", min router gap {watch.min_gap:.2e}" if watch is not None else ""
    print(f"{name}: vocab {vocab_size}, {size / 1024:.0f} KiB, max |logit| {max_logit:.3f}, "
          f"min greedy margin {min_margin:.5f}{extra}, seed {seed}, {len(keys)} GGUF keys", flush=True)
    return True, ""


def deepseek_yarn_softmax_scale(model):
    """DeepSeek's YaRN multiplies the softmax scale by mscale(factor, mscale_all_dim)^2 (DeepSeek-V2's
    own modeling code, and transformers' DeepseekV3Attention); transformers 4.57's
    DeepseekV2Attention leaves it out, so the reference applies it here."""
    rs = model.config.rope_scaling
    mscale = 0.1 * rs["mscale_all_dim"] * math.log(rs["factor"]) + 1.0
    patched = 0
    for module in model.modules():
        if type(module).__name__ == "DeepseekV2Attention":
            module.scaling = module.scaling * mscale * mscale
            patched += 1
    assert patched == model.config.num_hidden_layers, patched


def specs(lines):
    """The fixtures, in the order they are built."""
    T = transformers
    common = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2,
                  max_position_embeddings=512)
    chat = "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n"
    bpe_specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

    trained = {}

    def bpe(vocab, bos=False):
        if (vocab, bos) not in trained:
            trained[(vocab, bos)] = gpt2_bpe(lines, vocab, bpe_specials, bos="<|endoftext|>" if bos else None)
        tok = trained[(vocab, bos)]
        eos = tok.token_to_id("<|endoftext|>")
        cfg = {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "add_bos_token": bos}
        return BpeTok(tok, cfg, chat), eos

    out = []

    # Gemma 2: SentencePiece <pad> <eos> <bos> <unk>, turn markers as user-defined pieces.
    model = train_sentencepiece(lines, 520, dummy_prefix=False,
                                ids=dict(pad_id=0, eos_id=1, bos_id=2, unk_id=3, pad_piece="<pad>",
                                         eos_piece="<eos>", bos_piece="<bos>", unk_piece="<unk>"),
                                user_defined=["<start_of_turn>", "<end_of_turn>"])
    tok = SpmTok(model, T.GemmaTokenizer, {}, "<start_of_turn>user\nHello<end_of_turn>\n",
                 ["<start_of_turn>", "<end_of_turn>"])
    cfg = T.Gemma2Config(
        vocab_size=tok.vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
        max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=10000.0, sliding_window=8,
        attn_logit_softcapping=2.0, final_logit_softcapping=1.0, hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=True, pad_token_id=0, bos_token_id=2, eos_token_id=1,
        architectures=["Gemma2ForCausalLM"])
    out.append(dict(name="gemma2", cls=T.Gemma2ForCausalLM, config=cfg, tok=tok, seed=11, sliding=8, gemma=True,
                    embed_std=0.25 / 8))

    # Phi-3: SentencePiece <unk> <s> </s> (Llama 2 style, dummy prefix), chat markers user-defined.
    model = train_sentencepiece(lines, 500, dummy_prefix=True, ids=dict(unk_id=0, bos_id=1, eos_id=2, pad_id=-1),
                                user_defined=["<|endoftext|>", "<|user|>", "<|assistant|>", "<|end|>"])
    # legacy=True: each piece of text between special tokens gets SentencePiece's dummy-prefix
    # space, as llama.cpp's SPM tokenizer does with every GGUF (llama-vocab.cpp, is_prev_special);
    # the non-legacy tokenizer real Phi-3 checkpoints ask for leaves it out after special tokens.
    tok = SpmTok(model, T.LlamaTokenizer, {"legacy": True, "add_bos_token": True, "add_eos_token": False},
                 "<|user|>\nHello<|end|>\n<|assistant|>", ["<|endoftext|>", "<|user|>", "<|assistant|>", "<|end|>"])
    cfg = T.Phi3Config(
        vocab_size=tok.vocab_size(), num_hidden_layers=3, rms_norm_eps=1e-5, rope_theta=10000.0,
        rope_scaling=None, original_max_position_embeddings=512, sliding_window=None, tie_word_embeddings=False,
        bos_token_id=1, eos_token_id=2, pad_token_id=None, architectures=["Phi3ForCausalLM"], **common)
    out.append(dict(name="phi3", cls=T.Phi3ForCausalLM, config=cfg, tok=tok, seed=12))

    # Phi-3.5 / Phi-4-mini style: LongRoPE factors (distinct per frequency, so picking the wrong
    # list shows) and partial rotary 0.75; original context 16 of 256, so attn_factor
    # sqrt(1 + ln 16 / ln 16) = sqrt(2).
    rng = torch.Generator().manual_seed(77)
    half = int(0.75 * 16) // 2
    longrope = dict(type="longrope",
                    short_factor=[round(1.0 + 0.5 * float(x), 4) for x in torch.rand(half, generator=rng)],
                    long_factor=[round(1.0 + 7.0 * float(x), 4) for x in torch.rand(half, generator=rng)])
    cfg = T.Phi3Config(
        vocab_size=tok.vocab_size(), num_hidden_layers=3, rms_norm_eps=1e-5, rope_theta=10000.0,
        rope_scaling=longrope, partial_rotary_factor=0.75, original_max_position_embeddings=LONGROPE_ORIGINAL,
        sliding_window=None, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=None,
        architectures=["Phi3ForCausalLM"], **dict(common, max_position_embeddings=256))
    # InternLM2 (see export_internlm2): a Llama with GQA and a SentencePiece tokenizer (dummy
    # prefix), re-saved with a fused wqkv.
    cfg = T.LlamaConfig(
        vocab_size=tok.vocab_size(), num_hidden_layers=3, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=None,
        architectures=["LlamaForCausalLM"], **common)
    out.append(dict(name="internlm2", cls=T.LlamaForCausalLM, config=cfg, tok=tok, seed=14, export=export_internlm2))

    out.append(dict(name="phi3_longrope", cls=T.Phi3ForCausalLM, config=cfg, tok=tok, seed=13, longrope=True))

    tok, eos = bpe(380)
    cfg = T.GraniteConfig(
        vocab_size=tok.vocab_size(), num_hidden_layers=3, rms_norm_eps=1e-5, rope_theta=10000.0,
        embedding_multiplier=12.0, residual_multiplier=0.22, attention_multiplier=0.125, logits_scaling=8.0,
        tie_word_embeddings=False, bos_token_id=eos, eos_token_id=eos, pad_token_id=None,
        architectures=["GraniteForCausalLM"], **common)
    out.append(dict(name="granite", cls=T.GraniteForCausalLM, config=cfg, tok=tok, seed=13, embed_std=1.0 / 12))

    tok, eos = bpe(380)
    cfg = T.Olmo2Config(
        vocab_size=tok.vocab_size(), num_hidden_layers=3, rms_norm_eps=1e-6, rope_theta=500000.0,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=eos, pad_token_id=None,
        architectures=["Olmo2ForCausalLM"], **common)
    out.append(dict(name="olmo2", cls=T.Olmo2ForCausalLM, config=cfg, tok=tok, seed=14))

    tok, eos = bpe(380)
    cfg = T.SmolLM3Config(
        vocab_size=tok.vocab_size(), num_hidden_layers=4, rms_norm_eps=1e-6, rope_theta=2000000.0,
        no_rope_layer_interval=4, tie_word_embeddings=True, use_sliding_window=False, sliding_window=None,
        bos_token_id=None, eos_token_id=eos, pad_token_id=None, architectures=["SmolLM3ForCausalLM"], **common)
    out.append(dict(name="smollm3", cls=T.SmolLM3ForCausalLM, config=cfg, tok=tok, seed=15, embed_std=0.25))

    tok, eos = bpe(380)
    cfg = T.Starcoder2Config(
        vocab_size=tok.vocab_size(), num_hidden_layers=3, norm_epsilon=1e-5, rope_theta=100000.0,
        use_bias=True, hidden_act="gelu_pytorch_tanh", sliding_window=None, tie_word_embeddings=False,
        bos_token_id=eos, eos_token_id=eos, architectures=["Starcoder2ForCausalLM"], **common)
    out.append(dict(name="starcoder2", cls=T.Starcoder2ForCausalLM, config=cfg, tok=tok, seed=16, sliding=0))

    for suffix, parallel in (("", False), ("_parallel", True)):
        tok, eos = bpe(380)
        cfg = T.StableLmConfig(
            vocab_size=tok.vocab_size(), num_hidden_layers=3, layer_norm_eps=1e-5, rope_theta=10000.0,
            partial_rotary_factor=0.25, use_qkv_bias=True, use_parallel_residual=parallel, qk_layernorm=False,
            tie_word_embeddings=False, bos_token_id=eos, eos_token_id=eos, architectures=["StableLmForCausalLM"],
            **common)
        out.append(dict(name="stablelm" + suffix, cls=T.StableLmForCausalLM, config=cfg, tok=tok,
                        seed=17 + (100 if parallel else 0)))

    for suffix, qk in (("", False), ("_qknorm", True)):
        tok, eos = bpe(380, bos=True)
        cfg = T.CohereConfig(
            vocab_size=tok.vocab_size(), num_hidden_layers=3, layer_norm_eps=1e-5, rope_theta=10000.0,
            logit_scale=0.25, use_qk_norm=qk, tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos,
            pad_token_id=None, architectures=["CohereForCausalLM"], **common)
        out.append(dict(name="cohere" + suffix, cls=T.CohereForCausalLM, config=cfg, tok=tok,
                        seed=18 + (100 if qk else 0), embed_std=0.25))

    moe = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
    tok, eos = bpe(380)
    cfg = T.Qwen3MoeConfig(
        vocab_size=tok.vocab_size(), num_hidden_layers=3, intermediate_size=128, moe_intermediate_size=64,
        num_experts=4, num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[],
        head_dim=16, rms_norm_eps=1e-6, rope_theta=1000000.0, use_sliding_window=False, tie_word_embeddings=False,
        bos_token_id=eos, eos_token_id=eos, architectures=["Qwen3MoeForCausalLM"], **moe)
    out.append(dict(name="qwen3_moe", cls=T.Qwen3MoeForCausalLM, config=cfg, tok=tok, seed=19, top_k=2))

    tok, eos = bpe(380, bos=True)
    cfg = T.MixtralConfig(
        vocab_size=tok.vocab_size(), num_hidden_layers=3, intermediate_size=64, num_local_experts=4,
        num_experts_per_tok=2, head_dim=16, rms_norm_eps=1e-5, rope_theta=1000000.0, sliding_window=None,
        tie_word_embeddings=False, bos_token_id=eos, eos_token_id=eos, architectures=["MixtralForCausalLM"], **moe)
    out.append(dict(name="mixtral", cls=T.MixtralForCausalLM, config=cfg, tok=tok, seed=20, top_k=2))

    tok, eos = bpe(380)
    cfg = T.Qwen2MoeConfig(
        vocab_size=tok.vocab_size(), num_hidden_layers=3, intermediate_size=128, moe_intermediate_size=64,
        shared_expert_intermediate_size=96, num_experts=4, num_experts_per_tok=2, norm_topk_prob=False,
        decoder_sparse_step=1, mlp_only_layers=[], rms_norm_eps=1e-6, rope_theta=1000000.0,
        use_sliding_window=False, tie_word_embeddings=False, bos_token_id=eos, eos_token_id=eos,
        architectures=["Qwen2MoeForCausalLM"], **moe)
    out.append(dict(name="qwen2_moe", cls=T.Qwen2MoeForCausalLM, config=cfg, tok=tok, seed=21, top_k=2))

    tok, eos = bpe(380)
    cfg = T.OlmoeConfig(
        vocab_size=tok.vocab_size(), num_hidden_layers=3, intermediate_size=64, num_experts=4,
        num_experts_per_tok=2, norm_topk_prob=False, rms_norm_eps=1e-5, rope_theta=10000.0, clip_qkv=None,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=eos, pad_token_id=None,
        architectures=["OlmoeForCausalLM"], **moe)
    out.append(dict(name="olmoe", cls=T.OlmoeForCausalLM, config=cfg, tok=tok, seed=22, top_k=2))

    # DeepSeek-V2: multi-head latent attention (K/V through a rank-24 latent, queries directly
    # (Lite) or through a rank-20 latent; value heads of 12, key heads of 16 + 8 rotary), one
    # leading dense layer, then MoE layers with two shared experts (no gate) and routed weights
    # scaled by 1.5, not renormalized.
    for suffix, q_rank in (("_lite", None), ("", 20)):
        tok, eos = bpe(380)
        cfg = T.DeepseekV2Config(
            vocab_size=tok.vocab_size(), hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
            num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=2,
            n_routed_experts=4, num_experts_per_tok=2, routed_scaling_factor=1.5, kv_lora_rank=24,
            q_lora_rank=q_rank, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, topk_method="greedy",
            n_group=1, topk_group=1, norm_topk_prob=False, first_k_dense_replace=1, max_position_embeddings=512,
            rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=None, attention_bias=False,
            tie_word_embeddings=False, bos_token_id=eos, eos_token_id=eos, pad_token_id=None,
            architectures=["DeepseekV2ForCausalLM"])
        out.append(dict(name="deepseek2" + suffix, cls=T.DeepseekV2ForCausalLM, config=cfg, tok=tok,
                        seed=23 + (100 if q_rank else 0), top_k=2))

    # YaRN as Qwen2.5's long-context configs use it (no mscale keys: cos and sin scaled by
    # 1 + 0.1 ln factor): factor 4 over an original context of 64, 8 rotary pairs of head 16.
    tok, eos = bpe(380)
    cfg_q = T.Qwen2Config(
        vocab_size=tok.vocab_size(), num_hidden_layers=3, rms_norm_eps=1e-6, rope_theta=10000.0,
        rope_scaling=dict(type="yarn", factor=4.0, original_max_position_embeddings=64), use_sliding_window=False,
        tie_word_embeddings=False, bos_token_id=eos, eos_token_id=eos, architectures=["Qwen2ForCausalLM"],
        **dict(common, max_position_embeddings=256))
    out.append(dict(name="qwen2_yarn", cls=T.Qwen2ForCausalLM, config=cfg_q, tok=tok, seed=26))

    # DeepSeek-V2-Lite's YaRN (mscale = mscale_all_dim, as its config.json), scaled down: factor 8
    # over an original context of 64, so of the 4 rotary pairs the first keeps its frequency, the
    # second mixes, the last two are interpolated.
    tok, eos = bpe(380)
    yarn = dict(type="yarn", factor=8.0, original_max_position_embeddings=64, beta_fast=32.0, beta_slow=1.0,
                mscale=0.707, mscale_all_dim=0.707)
    cfg = T.DeepseekV2Config(**dict(cfg.to_dict(), q_lora_rank=None, rope_scaling=yarn, vocab_size=tok.vocab_size(),
                                    bos_token_id=eos, eos_token_id=eos))
    out.append(dict(name="deepseek2_yarn", cls=T.DeepseekV2ForCausalLM, config=cfg, tok=tok, seed=25, top_k=2,
                    patch=deepseek_yarn_softmax_scale))

    # DeepSeek-V2 236B's group-limited routing (group_limited_greedy): 8 experts in 4 groups of 2,
    # a token chooses its 3 experts from the 2 groups whose best softmax score is highest. Queries
    # through a rank-20 latent (llama.cpp reads q_lora_rank for every deepseek2 model not of Lite's
    # layer counts).
    tok, eos = bpe(380)
    cfg = T.DeepseekV2Config(
        vocab_size=tok.vocab_size(), hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=2,
        n_routed_experts=8, num_experts_per_tok=3, routed_scaling_factor=1.5, kv_lora_rank=24,
        q_lora_rank=20, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, topk_method="group_limited_greedy",
        n_group=4, topk_group=2, norm_topk_prob=False, first_k_dense_replace=1, max_position_embeddings=512,
        rms_norm_eps=1e-6, rope_theta=10000.0, rope_scaling=None, attention_bias=False,
        tie_word_embeddings=False, bos_token_id=eos, eos_token_id=eos, pad_token_id=None,
        architectures=["DeepseekV2ForCausalLM"])
    out.append(dict(name="deepseek2_groups", cls=T.DeepseekV2ForCausalLM, config=cfg, tok=tok, seed=27, top_k=3,
                    routing=dict(gating="softmax", n_group=4, topk_group=2, group_score="max")))

    # DeepSeek-V3 (and Kimi-K2, which converts the same way): sigmoid router scores, a per-expert
    # selection bias (e_score_correction_bias, llama.cpp's exp_probs_b) that picks experts but does
    # not weight them, the best 2 of 4 groups by the sum of their two best biased scores, the 3
    # chosen weights renormalized and scaled by 2.5; one shared expert; interleaved RoPE pairs.
    tok, eos = bpe(380)
    cfg = T.DeepseekV3Config(
        vocab_size=tok.vocab_size(), hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=4, n_shared_experts=1,
        n_routed_experts=8, num_experts_per_tok=3, routed_scaling_factor=2.5, kv_lora_rank=24,
        q_lora_rank=20, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=12, n_group=4, topk_group=2,
        norm_topk_prob=True, first_k_dense_replace=1, max_position_embeddings=512, rms_norm_eps=1e-6,
        rope_theta=10000.0, rope_scaling=None, rope_interleave=True, attention_bias=False,
        tie_word_embeddings=False, bos_token_id=eos, eos_token_id=eos, pad_token_id=None,
        scoring_func="sigmoid", topk_method="noaux_tc", architectures=["DeepseekV3ForCausalLM"])
    out.append(dict(name="deepseek3", cls=T.DeepseekV3ForCausalLM, config=cfg, tok=tok, seed=28, top_k=3,
                    prepare=deepseek3_selection_bias,
                    routing=dict(gating="sigmoid", n_group=4, topk_group=2, group_score="top2")))
    return out


def deepseek3_selection_bias(model, seed):
    """DeepSeek-V3's e_score_correction_bias is a buffer (randomize sets parameters only): N(0, 0.1),
    about the spread of the sigmoid scores near their top, so it changes which experts are chosen."""
    g = torch.Generator().manual_seed(seed + 1)
    n = 0
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.copy_(0.1 * torch.randn(buf.shape, generator=g))
                n += 1
    assert n == model.config.num_hidden_layers - model.config.first_k_dense_replace, n


# ---------------------------------------------------------------------------------------------
# --describe: the GGUF's metadata and tensors as markdown

def describe(llama_cpp, out_root, names):
    for name in names:
        path = os.path.join(out_root, name, "model.gguf")
        if not os.path.exists(path):
            continue
        gguf, reader = gguf_reader(llama_cpp, path)
        arch = field_value(gguf, reader.fields["general.architecture"])
        print(f"## {name}\n\ngeneral.architecture = `{arch}`\n\nMetadata:\n")
        for key, field in reader.fields.items():
            if key.startswith("GGUF."):
                continue
            value = field_value(gguf, field)
            if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type",
                       "tokenizer.ggml.scores"):
                value = f"[{len(value)} entries]"
            print(f"- `{key}` = {value!r}")
        print("\nTensors (non-layer and layer 0; ggml shape ne0, ne1, ...):\n")
        for t in reader.tensors:
            if t.name.startswith("blk.") and not t.name.startswith("blk.0."):
                continue
            shape = [int(x) for x in t.shape]
            print(f"- `{t.name}` {shape} {t.tensor_type.name}")
        print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    shared = os.path.join(ROOT, "..", "shared", "models", "text")
    parser.add_argument("--text", nargs="+", default=[os.path.join(shared, "tinystories_val.txt"),
                                                      os.path.join(shared, "wikitext-2-test.txt")])
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "arch"))
    parser.add_argument("--llama-cpp", default=DEFAULT_LLAMA_CPP)
    parser.add_argument("--only", nargs="*", help="fixture names to build (default: all)")
    parser.add_argument("--describe", action="store_true", help="print the GGUFs' metadata and tensors")
    args = parser.parse_args()
    torch.set_num_threads(1)
    lines = read_corpus(args.text)
    all_specs = specs(lines)
    names = [s["name"] for s in all_specs]
    if args.describe:
        describe(args.llama_cpp, args.out, args.only or names)
        return 0
    os.makedirs(args.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        for spec in all_specs:
            if args.only and spec["name"] not in args.only:
                continue
            build(spec, args.out, args.llama_cpp, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
