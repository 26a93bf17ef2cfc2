// Real vocabularies for synthetic models (gen-model): the tokenizer.ggml.* keys of a GGUF.
//
// Llama 3: Meta's tiktoken ranks (tokenizer.model) become a GGUF "gpt2" vocabulary as llama.cpp's
// converter writes it: tokens spelled in GPT-2's byte-to-unicode alphabet, Llama 3's 256 special
// tokens as control tokens, pre-tokenizer "llama-bpe", and a merges list derived from the ranks so
// that merge-based BPE (llama.cpp, Kestrel) gives the same tokens as tiktoken: the same keys and
// values as a GGUF that llama.cpp converts from Meta's Hugging Face release.
// Llama 2: the tokenizer.* keys of an existing GGUF are copied as they are.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace kestrel::gguf {
class GgufWriter;
}

namespace kestrel {

// Merges equivalent to tiktoken ranks (the conversion Hugging Face's TikTokenConverter does, which
// gives Llama 3's tokenizer.json its 280,147 merges). token_bytes[r] holds the raw bytes of the
// token of rank r. For each token in rank order, every split into two parts that are both tokens
// becomes a merge "left right" (byte-alphabet spelling), splits ordered by (rank of left, rank of
// right). Merge-based BPE then joins, at each step, the adjacent pair whose result has the lowest
// rank, which is what tiktoken does.
//
// Listing only the one split that BPE over the token's own bytes ends in (127,066 merges for
// Llama 3) is not enough: a pair can meet inside a longer word that BPE of the token alone never
// forms (e.g. " highwaysерату..." tokenizes differently), and 678 Llama 3 tokens have no such split
// at all. On 2 MB of English text both agree with tiktoken; on words made of random tokens, 97 of
// 178,873 differ with the one-split list and none with this one.
std::vector<std::string> merges_from_tiktoken_ranks(std::span<const std::string> token_bytes);

// Sets the Llama 3 vocabulary keys from Meta's tokenizer.model. Returns the vocabulary size
// (128,256 for Meta's file: 128,000 ranks and 256 special tokens).
int64_t set_llama3_vocab(gguf::GgufWriter& writer, const std::string& tiktoken_path);

// Copies every tokenizer.* key of a GGUF file (e.g. llama.cpp's ggml-vocab-llama-spm.gguf).
// Returns the vocabulary size.
int64_t copy_gguf_vocab(gguf::GgufWriter& writer, const std::string& gguf_path);

}  // namespace kestrel
