// Hugging Face model folders (config.json + *.safetensors + tokenizer.json), read as if they were a
// GGUF file: the metadata gets GGUF's keys (what llama.cpp's converter writes) and the tensors
// GGUF's names, shapes and conventions. Everything downstream (model, tokenizer, `kestrel info`,
// `kestrel convert`) then has one path for both sources.
//
// Conventions applied on the way in, as llama.cpp's convert_hf_to_gguf does:
// - Llama/Mistral: Q and K rows are permuted from Hugging Face's half-split RoPE layout to GGUF's
//   interleaved ("normal") layout;
// - Gemma 3: RMSNorm weights w become 1 + w (Gemma normalises by (1 + w));
// - Llama 3 RoPE scaling becomes a rope_freqs.weight tensor of per-frequency divisors.
#pragma once

#include <memory>
#include <string>

#include "loader/gguf_reader.h"

namespace kestrel {

// True if `path` is a directory holding config.json.
bool is_hf_folder(const std::string& path);

// Throws kestrel::Error naming the file and the problem (missing config key, unknown architecture
// or dtype, truncated safetensors, tensor shapes that disagree with the config). `residency`: the
// safetensors files mapped or read into memory (core/mapped_file.h).
std::unique_ptr<gguf::GgufFile> load_hf_folder(const std::string& folder, FileResidency residency = FileResidency::Mapped);

// tokenizer.json -> GGUF tokenizer.ggml.* keys (appended to `metadata`). `config` supplies
// bos/eos ids when tokenizer_config.json does not.
void append_hf_tokenizer_metadata(const std::string& folder, std::vector<gguf::KeyValue>& metadata);

}  // namespace kestrel
