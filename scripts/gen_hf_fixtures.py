#!/usr/bin/env python3
"""Writes the Hugging Face model fixtures under tests/data/hf/ (run by hand, never in CI).

Each fixture is a tiny random-weight model of one architecture, saved the way the Hub ships models
(config.json, model.safetensors in float32, tokenizer.json + tokenizer_config.json), plus
reference.json: what transformers computes for it (logits of the last positions of each prompt,
greedy continuations, tokenizer ids). tests/e2e/hf_models_test.cpp checks Kestrel against it.

  name     class               what it exercises
  llama    LlamaForCausalLM    GQA, llama3 rope_scaling (rope_freqs), untied lm_head, Q/K permutation,
                               byte-level BPE with Llama 3's split regex and ignore_merges, BOS from a
                               Sequence post-processor
  mistral  MistralForCausalLM  sliding_window 8 on every layer (prompts and generations past it),
                               SentencePiece-style BPE (byte fallback, Prepend + Replace "▁")
  qwen2    Qwen2ForCausalLM    q/k/v biases, tied embeddings, vocab_size > tokenizer size (padding),
                               byte-level BPE with Qwen2's split regex, no BOS
  qwen3    Qwen3ForCausalLM    per-head q/k RMSNorm, head_dim * heads != hidden
  gemma3   Gemma3ForCausalLM   Gemma norms (1 + w), post-norms, GeLU-tanh, embedding scale, q/k norm,
                               sliding_window 8 with sliding_window_pattern 3 (local, local, global,
                               local), local RoPE base 10000 vs global 1e6 with linear scaling 8 on
                               global layers only, SentencePiece-style BPE (Replace "▁", no Prepend)

Weights are seeded and drawn at a scale that keeps activations O(1) (matrices std 1/sqrt(fan_in),
embeddings std 1, norms 1 +- 0.1 or Gemma's 0 +- 0.1). Greedy choices must not be near-ties: a seed
is kept only if every greedy step's top-1/top-2 logit gap is at least MIN_MARGIN_RATIO (2e-4) of
the largest |logit|, far above float32 rounding (about 1e-6 of it); else the next seed is tried.
reference.json records the seed and min_greedy_margin.

Pinned versions (a venv under /tmp; torch from PyPI, CPU use only):
  python 3.11.7, torch 2.15.0, transformers 4.57.6, tokenizers 0.22.2, safetensors 0.8.0,
  numpy 2.4.6

  python3 -m venv /tmp/hfvenv
  /tmp/hfvenv/bin/pip install torch==2.15.0 transformers==4.57.6 tokenizers==0.22.2 \
      safetensors==0.8.0 numpy==2.4.6
  /tmp/hfvenv/bin/python scripts/gen_hf_fixtures.py [--text FILE ...] [--out tests/data/hf]

transformers 4.57 (the last 4.x) writes config.json in the format the Hub's models use
(rope_theta / rope_scaling); 5.x writes rope_parameters instead, which Kestrel does not read yet.

The tokenizers are trained on the first 200 KB of ../shared/models/text/tinystories_val.txt and
wikitext-2-test.txt (the default --text files); training is deterministic for the same text.
"""

import argparse
import json
import math
import os
import shutil
import sys

import numpy as np
import torch
import transformers
import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")

# Strings whose ids the tests compare with Kestrel's tokenizer (with and without special tokens).
TOKENIZER_STRINGS = [
    "Once upon a time, there was a little girl named Lily.",
    "Hello world",
    " leading space and  two  spaces",
    "numbers 1234567 and 3.14159, don't WE'LL it's",
    "line one\nline two\n\n\ttabbed",
    "café naïve 日本語 ☃ emoji 🦙",
    "",
]

# Prompt texts; a random-id prompt of 40 tokens is added to each model (longer than the windows).
PROMPT_TEXTS = [
    "Once upon a time",
    "The little dog ran to the park and saw a big red ball. He wanted to play with it",
    "Tom said",
]
GREEDY_TOKENS = 16
LONG_GREEDY_TOKENS = 64   # sliding-window models: generation far past the window
MIN_MARGIN_RATIO = 2e-4
LOGIT_POSITIONS = 4       # logits are kept for the last positions of each prompt (all if shorter than 8)


def read_corpus(paths, limit=200_000):
    text = ""
    for p in paths:
        with open(p, encoding="utf-8") as f:
            text += f.read(limit) + "\n"
    # A few characters the corpora lack, so that they become tokens (or byte fallbacks) too.
    text += "café naïve 日本語 ☃ 1234567 3.14159 don't WE'LL it's\n" * 3
    return [line for line in text.split("\n") if line.strip()]


def byte_level_bpe(lines, regex, vocab_size, specials, ignore_merges):
    """A GPT-2 style byte-level BPE with a Split + ByteLevel pre-tokenizer (as Llama 3 and Qwen2)."""
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    # Special tokens come after the BPE vocabulary, as in the real models.
    tok.add_special_tokens(specials)
    return tok


def spm_style_bpe(lines, vocab_size, specials, prepend):
    """A SentencePiece-converted style BPE: byte fallback, "▁" for spaces, <0xNN> byte tokens, and
    merges as transformers' SentencePiece converter writes them: every pair of pieces whose
    concatenation is a piece, ordered by that piece's rank. (Merges as the trainer writes them can
    give a different split than SentencePiece's score-ordered merging, which real
    Gemma/Mistral tokenizer.json files never do.)"""
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    norm = [normalizers.Replace(" ", "▁")]
    if prepend:
        norm.insert(0, normalizers.Prepend("▁"))
    tok.normalizer = normalizers.Sequence(norm)
    # Training only: words start at "▁" (SentencePiece's split_by_whitespace).
    tok.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials + byte_tokens, show_progress=False,
                                  limit_alphabet=120)
    tok.train_from_iterator(lines, trainer)
    trained = json.loads(tok.to_str())
    vocab = trained["model"]["vocab"]
    reserved = set(specials) | set(byte_tokens)
    pieces = {t: i for t, i in vocab.items() if t not in reserved}
    merges = []
    for a in pieces:
        for b in pieces:
            ab = a + b
            if ab in pieces:
                merges.append((pieces[ab], pieces[a], pieces[b], a, b))
    merges.sort()
    trained["model"]["merges"] = [[a, b] for _, _, _, a, b in merges]
    trained["pre_tokenizer"] = None
    # The trainer lists its special tokens as added tokens; in converted SentencePiece models the
    # byte tokens are plain vocabulary entries (only <unk>, <s>, ... are added tokens).
    trained["added_tokens"] = [t for t in trained["added_tokens"] if t["content"] not in byte_tokens]
    return Tokenizer.from_str(json.dumps(trained))


def sentencepiece_decoder(strip_leading):
    parts = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
    if strip_leading:
        parts.append(decoders.Strip(" ", 1, 0))
    return decoders.Sequence(parts)


def save_tokenizer(tok, folder, tokenizer_config):
    tok.save(os.path.join(folder, "tokenizer.json"))
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1024,
              "clean_up_tokenization_spaces": False}
    config.update(tokenizer_config)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2, ensure_ascii=False)
        f.write("\n")


def randomize(model, seed, gemma, embed_std):
    """Seeded weights at a scale that keeps activations O(1): matrices N(0, 1/fan_in), embeddings
    N(0, embed_std), biases N(0, 0.1), norm weights 1 +- 0.1 (Gemma stores w of (1 + w): 0 +- 0.1).
    With tied embeddings a large embed_std makes the model echo its last token (the residual is
    mostly that token's embedding, whose dot product with itself wins): those use a small one."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                base = 0.0 if gemma else 1.0
                p.copy_(base + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(embed_std * torch.randn(p.shape, generator=g))
            else:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[-1]))


def greedy(model, prompt, n):
    """transformers' generate (do_sample=False) with EOS ignored; also checked against an argmax
    over a full (uncached) forward, and returns the smallest top-1/top-2 logit gap on the way."""
    ids = torch.tensor([prompt])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, do_sample=False,
                         eos_token_id=None, pad_token_id=0)
    tokens = out[0, len(prompt):].tolist()
    assert len(tokens) == n, (len(tokens), n)
    full = model(out[:, :-1]).logits[0, len(prompt) - 1:]
    top2 = torch.topk(full, 2, dim=-1)
    assert top2.indices[:, 0].tolist() == tokens, "generate differs from a full forward's argmax"
    margin = float((top2.values[:, 0] - top2.values[:, 1]).min())
    return tokens, margin


def floats(t):
    # 9 significant digits hold a float32 exactly.
    return [float(f"{x:.9g}") for x in t.reshape(-1).tolist()]


def reference_runs(model, hf_tok, seed, sliding, architecture, vocab_size):
    """transformers' logits of the last LOGIT_POSITIONS positions and greedy runs of PROMPT_TEXTS
    plus 40 seeded random ids: reference.json up to its (empty) "tokenizer" list, and the smallest
    greedy top-1/top-2 margin seen."""
    rng = np.random.default_rng(seed)
    prompts = [hf_tok.encode(t, add_special_tokens=True) for t in PROMPT_TEXTS]
    prompts.append([int(x) for x in rng.integers(0, len(hf_tok), size=40)])
    ref = {
        "architecture": architecture,
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "tokenizers": tokenizers.__version__,
        "vocab_size": vocab_size,
        "sliding_window": sliding,
        "prompts": [],
        "tokenizer": [],
    }
    min_margin = float("inf")
    with torch.no_grad():
        for prompt in prompts:
            logits = model(torch.tensor([prompt])).logits[0]
            first = 0 if len(prompt) < 8 else len(prompt) - LOGIT_POSITIONS
            tokens, margin = greedy(model, prompt, GREEDY_TOKENS)
            min_margin = min(min_margin, margin)
            entry = {"ids": prompt, "logits_from": first, "logits": floats(logits[first:]),
                     "max_abs_logit": float(logits.abs().max()), "greedy": tokens}
            if sliding:
                entry["greedy_long"], margin = greedy(model, prompt, LONG_GREEDY_TOKENS)
                min_margin = min(min_margin, margin)
            ref["prompts"].append(entry)
    return ref, min_margin


def build(name, out_root, model_cls, config, tok, tokenizer_config, seed, sliding, gemma=False,
          config_edit=None, special_text=""):
    """Writes the fixture, trying seeds seed, seed + 1000, ... until every greedy step's top-1/top-2
    gap is at least MIN_MARGIN_RATIO of the largest |logit| (so float32 rounding, about 1e-6 of
    it, cannot flip a greedy choice)."""
    for attempt in range(20):
        ratio = build_once(name, out_root, model_cls, config, tok, tokenizer_config, seed + 1000 * attempt,
                           sliding, gemma, config_edit, special_text)
        if ratio >= MIN_MARGIN_RATIO:
            return
        print(f"{name}: seed {seed + 1000 * attempt}: greedy margin ratio {ratio:.2e} too small; next seed")
    raise SystemExit(f"{name}: no seed gave a greedy margin ratio >= {MIN_MARGIN_RATIO}")


def build_once(name, out_root, model_cls, config, tok, tokenizer_config, seed, sliding, gemma, config_edit,
               special_text):
    folder = os.path.join(out_root, name)
    shutil.rmtree(folder, ignore_errors=True)
    os.makedirs(folder)
    torch.manual_seed(seed)
    model = model_cls(config)
    embed_std = 1.0
    if config.tie_word_embeddings:
        embed_std = 0.25 / (math.sqrt(config.hidden_size) if gemma else 1.0)
    randomize(model, seed, gemma, embed_std)
    model.save_pretrained(folder, safe_serialization=True)
    for extra in ("generation_config.json",):
        path = os.path.join(folder, extra)
        if os.path.exists(path):
            os.remove(path)
    if config_edit is not None:
        path = os.path.join(folder, "config.json")
        with open(path) as f:
            cfg = json.load(f)
        config_edit(cfg)
        with open(path, "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
    save_tokenizer(tok, folder, tokenizer_config)

    # The reference comes from the saved folder, read back as any user would.
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                              attn_implementation="eager")
    model.eval()
    hf_tok = transformers.AutoTokenizer.from_pretrained(folder)
    vocab_size = model.config.vocab_size
    assert vocab_size >= len(hf_tok), (vocab_size, len(hf_tok))

    architecture = config.architectures[0] if config.architectures else model_cls.__name__
    ref, min_margin = reference_runs(model, hf_tok, seed, sliding, architecture, vocab_size)
    max_logit = max(p["max_abs_logit"] for p in ref["prompts"])
    ref["seed"] = seed
    ref["min_greedy_margin"] = min_margin
    for text in TOKENIZER_STRINGS + [special_text]:
        ref["tokenizer"].append({"text": text,
                                 "with_special": hf_tok.encode(text, add_special_tokens=True),
                                 "without_special": hf_tok.encode(text, add_special_tokens=False)})
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump(ref, f, separators=(",", ":"), ensure_ascii=False)
        f.write("\n")
    size = sum(os.path.getsize(os.path.join(folder, x)) for x in os.listdir(folder))
    print(f"{name}: vocab {vocab_size} (tokenizer {len(hf_tok)}), {size / 1024:.0f} KiB, "
          f"max |logit| {max_logit:.3f}, min greedy margin {min_margin:.5f}, seed {seed}")
    return min_margin / max_logit


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    shared = os.path.join(ROOT, "..", "shared", "models", "text")
    parser.add_argument("--text", nargs="+", default=[os.path.join(shared, "tinystories_val.txt"),
                                                      os.path.join(shared, "wikitext-2-test.txt")])
    parser.add_argument("--out", default=os.path.join(ROOT, "tests", "data", "hf"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    lines = read_corpus(args.text)
    os.makedirs(args.out, exist_ok=True)

    # Llama 3 style: byte-level BPE, <|begin_of_text|> added by a Sequence[ByteLevel, Template].
    tok = byte_level_bpe(lines, LLAMA3_REGEX, 360, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"],
                         ignore_merges=True)
    bos, eos = tok.token_to_id("<|begin_of_text|>"), tok.token_to_id("<|end_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    config = transformers.LlamaConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False, bos_token_id=bos,
        eos_token_id=eos, architectures=["LlamaForCausalLM"],
        # original_max_position_embeddings 64: with head_dim 16 the wavelengths 6.3, 32, 167, ...
        # fall in all three bands (kept, smoothed, divided by factor).
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64})
    build("llama", args.out, transformers.LlamaForCausalLM, config, tok,
          {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, seed=1, sliding=0,
          special_text="<|begin_of_text|>Hi there<|eot_id|>\n")

    # Mistral (Llama 2 style SentencePiece BPE): <unk> <s> </s>, bytes, pieces; Prepend + Replace.
    specials = ["<unk>", "<s>", "</s>"]
    tok = spm_style_bpe(lines, 600, specials, prepend=True)
    tok.decoder = sentencepiece_decoder(strip_leading=True)
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    config = transformers.MistralConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
        rms_norm_eps=1e-5, rope_theta=10000.0, sliding_window=8, tie_word_embeddings=False, bos_token_id=1,
        eos_token_id=2, architectures=["MistralForCausalLM"])
    build("mistral", args.out, transformers.MistralForCausalLM, config, tok,
          {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True,
           "add_eos_token": False}, seed=2, sliding=8, special_text="<s> Hello</s> world")

    # Qwen2: byte-level BPE with Qwen2's regex and NFC, no BOS; the model's vocab is padded past
    # the tokenizer's (as Qwen's 151936 > 151665).
    tok = byte_level_bpe(lines, QWEN2_REGEX, 400, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                         ignore_merges=False)
    tok.normalizer = normalizers.NFC()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    eos = tok.token_to_id("<|endoftext|>")
    config = transformers.Qwen2Config(
        vocab_size=tok.get_vocab_size() + 13, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, rms_norm_eps=1e-6,
        rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False, sliding_window=4096,
        bos_token_id=eos, eos_token_id=eos, architectures=["Qwen2ForCausalLM"])
    build("qwen2", args.out, transformers.Qwen2ForCausalLM, config, tok,
          {"bos_token": None, "eos_token": "<|endoftext|>", "add_bos_token": False}, seed=3, sliding=0,
          special_text="<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n")

    # Qwen3: same tokenizer family; q/k norms, head_dim 32 with 4 heads over hidden 64.
    tok = byte_level_bpe(lines, QWEN2_REGEX, 420, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                         ignore_merges=False)
    tok.normalizer = normalizers.NFC()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    eos = tok.token_to_id("<|endoftext|>")
    config = transformers.Qwen3Config(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
        rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False, attention_bias=False,
        bos_token_id=eos, eos_token_id=eos, architectures=["Qwen3ForCausalLM"])
    build("qwen3", args.out, transformers.Qwen3ForCausalLM, config, tok,
          {"bos_token": None, "eos_token": "<|endoftext|>", "add_bos_token": False}, seed=4, sliding=0,
          special_text="<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n")

    # Gemma 3: <pad> <eos> <bos> <unk> <start_of_turn> <end_of_turn>, bytes, pieces; Replace only.
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    tok = spm_style_bpe(lines, 560, specials, prepend=False)
    tok.decoder = sentencepiece_decoder(strip_leading=False)
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", 2)])
    config = transformers.Gemma3TextConfig(
        vocab_size=tok.get_vocab_size(), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=32,
        max_position_embeddings=512, rms_norm_eps=1e-6, rope_theta=1000000.0, rope_local_base_freq=10000.0,
        rope_scaling={"rope_type": "linear", "factor": 8.0}, sliding_window=8, sliding_window_pattern=3,
        final_logit_softcapping=None, attn_logit_softcapping=None, hidden_activation="gelu_pytorch_tanh",
        tie_word_embeddings=True, pad_token_id=0, bos_token_id=2, eos_token_id=1,
        architectures=["Gemma3ForCausalLM"])

    def hub_style_gemma(cfg):
        # The Hub's Gemma 3 configs give the period, not a per-layer list.
        del cfg["layer_types"]
        cfg.pop("_sliding_window_pattern", None)
        cfg["sliding_window_pattern"] = 3

    build("gemma3", args.out, transformers.Gemma3ForCausalLM, config, tok,
          {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>",
           "add_bos_token": True, "add_eos_token": False}, seed=5, sliding=8, gemma=True,
          config_edit=hub_style_gemma, special_text="<start_of_turn>user\nHello<end_of_turn>\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
