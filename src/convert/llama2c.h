// Converts a llama2.c checkpoint (legacy "version 0" format: a 7 x int32 header, then F32
// weights) and its tokenizer.bin into a GGUF file of architecture "llama".
#pragma once

#include <string>

namespace kestrel {

struct Llama2cHeader {
  int32_t dim = 0;
  int32_t hidden_dim = 0;
  int32_t n_layers = 0;
  int32_t n_heads = 0;
  int32_t n_kv_heads = 0;
  int32_t vocab_size = 0;   // negative in the file when the classifier is not shared
  int32_t seq_len = 0;
  bool shared_classifier = true;
};

// Throws kestrel::Error naming the file for a truncated or inconsistent checkpoint/tokenizer.
void convert_llama2c_to_gguf(const std::string& checkpoint_path, const std::string& tokenizer_path,
                             const std::string& output_path);

}  // namespace kestrel
