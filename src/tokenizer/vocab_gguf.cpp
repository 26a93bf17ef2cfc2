// Tokenizer::vocab_from_gguf: the tokenizer.ggml.* metadata keys -> VocabData.
#include <cstdint>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "tokenizer/pretokenizer_kinds.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

namespace {

using gguf::Array;
using gguf::GgufFile;
using gguf::Value;

const Array* require_array(const GgufFile& file, const char* key) {
  const Array* array = file.get_array(key);
  if (array == nullptr) fail("{}: required metadata key '{}' is missing", file.name(), key);
  return array;
}

std::vector<std::string> read_strings(const GgufFile& file, const char* key, const Array& array) {
  std::vector<std::string> out;
  out.reserve(array.items.size());
  for (size_t i = 0; i < array.items.size(); ++i) {
    const std::string* s = array.items[i].as_string();
    if (s == nullptr) {
      fail("{}: '{}' item {} should be a string but is {}", file.name(), key, i,
           gguf::value_type_name(array.items[i].type()));
    }
    out.push_back(*s);
  }
  return out;
}

// Reads an optional per-token array and checks that it has one item per token.
const Array* per_token_array(const GgufFile& file, const char* key, size_t token_count) {
  const Array* array = file.get_array(key);
  if (array != nullptr && array->items.size() != token_count) {
    fail("{}: '{}' has {} items but there are {} tokens", file.name(), key, array->items.size(),
         token_count);
  }
  return array;
}

// `fallback` is used when the key is absent, and only if the vocabulary is big enough to have it.
TokenId read_token_id(const GgufFile& file, const char* key, TokenId fallback, size_t token_count) {
  const std::optional<uint64_t> id = file.get_uint(key);
  if (!id) return fallback >= 0 && size_t(fallback) < token_count ? fallback : -1;
  // Some converters write 0xFFFFFFFF (-1 as uint32) for "no such token".
  if (*id == 0xffffffffu) return -1;
  if (*id > uint64_t(INT32_MAX)) fail("{}: '{}' = {} is not a token id", file.name(), key, *id);
  return TokenId(*id);
}

}  // namespace

VocabData Tokenizer::vocab_from_gguf(const gguf::GgufFile& file) {
  VocabData vocab;
  const std::string model = file.require_string("tokenizer.ggml.model");
  if (model == "llama") {
    vocab.kind = VocabKind::SentencePiece;
  } else if (model == "gpt2" || model == "gemma4") {
    vocab.kind = VocabKind::BytePairEncoding;
  } else if (model == "bert") {
    vocab.kind = VocabKind::WordPiece;
  } else {
    fail("{}: unsupported tokenizer model '{}' (tokenizer.ggml.model); supported: 'llama' "
         "(SentencePiece), 'gpt2' (byte-level BPE), 'gemma4' (SentencePiece-style BPE) and 'bert' "
         "(WordPiece)",
         file.name(), model);
  }
  const bool spm = vocab.kind == VocabKind::SentencePiece;
  const bool wpm = vocab.kind == VocabKind::WordPiece;

  vocab.tokens = read_strings(file, "tokenizer.ggml.tokens",
                              *require_array(file, "tokenizer.ggml.tokens"));
  const size_t n = vocab.tokens.size();
  if (n == 0) fail("{}: 'tokenizer.ggml.tokens' is empty", file.name());

  if (const Array* scores = per_token_array(file, "tokenizer.ggml.scores", n)) {
    vocab.scores.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const std::optional<double> score = scores->items[i].as_float();
      if (!score) fail("{}: 'tokenizer.ggml.scores' item {} is not a number", file.name(), i);
      vocab.scores.push_back(float(*score));
    }
  }
  if (const Array* types = per_token_array(file, "tokenizer.ggml.token_type", n)) {
    vocab.types.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const std::optional<int64_t> type = types->items[i].as_int();
      if (!type || *type < int64_t(TokenType::Undefined) || *type > int64_t(TokenType::Byte)) {
        fail("{}: 'tokenizer.ggml.token_type' item {} is not a token type (0-6)", file.name(), i);
      }
      vocab.types.push_back(TokenType(*type));
    }
  }
  if (const Array* merges = file.get_array("tokenizer.ggml.merges")) {
    vocab.merges = read_strings(file, "tokenizer.ggml.merges", *merges);
  } else if (vocab.kind == VocabKind::BytePairEncoding) {
    fail("{}: required metadata key 'tokenizer.ggml.merges' is missing (needed by a 'gpt2' "
         "tokenizer)",
         file.name());
  }

  vocab.pre = file.get_string("tokenizer.ggml.pre").value_or("default");
  // llama.cpp gives a "gemma4" tokenizer the gemma4 pre-tokenizer whatever the file says.
  if (model == "gemma4") vocab.pre = "gemma4";
  // Defaults as in llama.cpp: SentencePiece vocabs use <unk>=0, <s>=1, </s>=2 unless told; BERT's
  // [PAD]=0, [UNK]=100, [CLS]=101 (its BOS), [SEP]=102.
  vocab.bos_id = read_token_id(file, "tokenizer.ggml.bos_token_id", spm ? 1 : wpm ? 101 : -1, n);
  vocab.eos_id = read_token_id(file, "tokenizer.ggml.eos_token_id", spm ? 2 : -1, n);
  vocab.unk_id = read_token_id(file, "tokenizer.ggml.unknown_token_id", spm ? 0 : wpm ? 100 : -1, n);
  vocab.pad_id = read_token_id(file, "tokenizer.ggml.padding_token_id", wpm ? 0 : -1, n);
  vocab.eot_id = read_token_id(file, "tokenizer.ggml.eot_token_id", -1, n);
  vocab.sep_id = read_token_id(file, "tokenizer.ggml.seperator_token_id", wpm ? 102 : -1, n);  // sic
  if (wpm) {
    if (vocab.unk_id < 0) fail("{}: a WordPiece vocabulary needs an unknown token ([UNK])", file.name());
    vocab.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(vocab.bos_id >= 0);
    vocab.add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
    vocab.add_sep = file.get_bool("tokenizer.ggml.add_sep_token").value_or(vocab.sep_id >= 0);
    vocab.add_space_prefix = false;
    // BertNormalizer: strip_accents follows lowercase unless the file says otherwise.
    vocab.lowercase = file.get_bool("tokenizer.ggml.normalizer.lowercase").value_or(true);
    vocab.strip_accents = file.get_bool("tokenizer.ggml.normalizer.strip_accents").value_or(vocab.lowercase);
    return vocab;
  }

  // SentencePiece vocabs add a BOS by default, and so do some pre-tokenizers (Llama 3, Tekken,
  // Chameleon); Gemma 4's always does (llama.cpp overrides the file there). An unknown pre is
  // reported when the tokenizer is built.
  const tokenizer::PreTokenizerKind* pre_kind =
      spm ? nullptr : tokenizer::find_pre_tokenizer_kind(vocab.pre);
  const bool default_add_bos = (spm || (pre_kind != nullptr && pre_kind->add_bos)) && vocab.bos_id >= 0;
  vocab.add_bos = file.get_bool("tokenizer.ggml.add_bos_token").value_or(default_add_bos);
  if (pre_kind != nullptr && pre_kind->force_bos && vocab.bos_id >= 0) vocab.add_bos = true;
  vocab.add_eos = file.get_bool("tokenizer.ggml.add_eos_token").value_or(false);
  vocab.add_space_prefix = spm && file.get_bool("tokenizer.ggml.add_space_prefix").value_or(true);
  return vocab;
}

}  // namespace kestrel
