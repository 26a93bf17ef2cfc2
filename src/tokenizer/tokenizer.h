// Tokenizers built from GGUF metadata: SentencePiece-style ("llama": scores, byte fallback, the
// U+2581 space), byte-level BPE ("gpt2": merges or tiktoken ranks, pre-tokenizer regexes per
// tokenizer.ggml.pre) and BERT's WordPiece ("bert": greedy longest match per word). Special tokens
// are matched in the text when parse_special is set.
// Encoding follows llama.cpp token for token (checked against its test vectors and llama-tokenize).
// All methods are const and safe to call from several threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kestrel::gguf {
class GgufFile;
}

namespace kestrel {

using TokenId = int32_t;

// GGUF token types (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

enum class VocabKind { SentencePiece, BytePairEncoding, WordPiece };

// Everything a tokenizer needs, as read from GGUF metadata (or a tiktoken file).
struct VocabData {
  VocabKind kind = VocabKind::SentencePiece;
  std::string pre = "default";            // tokenizer.ggml.pre
  std::vector<std::string> tokens;        // as stored: SPM pieces use U+2581 for space; BPE pieces
                                          // use GPT-2's byte-to-unicode alphabet
  std::vector<float> scores;              // SPM merge priorities (may be empty for BPE)
  std::vector<TokenType> types;           // empty means all Normal
  std::vector<std::string> merges;        // BPE "left right" pairs in rank order. Empty for a
                                          // tiktoken vocab: there a pair's rank is the id of the
                                          // token the two parts form (ids are tiktoken ranks)
  TokenId bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1, eot_id = -1;
  TokenId sep_id = -1;                    // BERT's [SEP], appended after the text when add_sep
  bool add_bos = false;
  bool add_eos = false;
  bool add_sep = false;
  bool add_space_prefix = true;           // SPM only
  bool lowercase = true;                  // WordPiece only (BertNormalizer): lowercase the text,
  bool strip_accents = true;              // and drop the accents of its NFD form
};

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  // Reads tokenizer.ggml.* keys; a missing or malformed key is a kestrel::Error naming the file.
  static VocabData vocab_from_gguf(const gguf::GgufFile& file);
  static std::unique_ptr<Tokenizer> create(VocabData vocab);
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::GgufFile& file);
  // Meta's Llama 3 tiktoken file (base64 token + rank per line) plus Llama 3's 256 special tokens
  // (<|begin_of_text|> = 128000 ...), with the llama-bpe pre-tokenizer.
  static std::unique_ptr<Tokenizer> from_tiktoken_llama3(const std::string& path);

  // add_special: prepend BOS / append EOS as the vocab asks. parse_special: text such as "<s>"
  // or "<|eot_id|>" becomes that special token (control and unknown types) instead of being
  // tokenized as text; user-defined tokens are matched either way, as in llama.cpp. For SPM with
  // add_space_prefix, the dummy space goes in front of the text and after every special token.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;

  // The raw bytes a token stands for (SPM: U+2581 -> ' ', <0xNN> -> byte; BPE: byte alphabet
  // decoded). Control and unknown tokens give their text only when render_special is set;
  // undefined and unused tokens give nothing (as in llama.cpp).
  virtual std::string token_to_piece(TokenId id, bool render_special) const = 0;

  // Decodes a whole sequence. For SPM with add_space_prefix, the single leading space that the
  // encoder added is removed from the first token and from a token right after BOS, so
  // decode(encode(s)) == s for text without special tokens. Ids out of range are a kestrel::Error.
  virtual std::string decode(std::span<const TokenId> ids, bool render_special) const = 0;

  virtual const VocabData& vocab() const = 0;
  int32_t vocab_size() const { return int32_t(vocab().tokens.size()); }
  TokenId bos_id() const { return vocab().bos_id; }
  TokenId eos_id() const { return vocab().eos_id; }
  // True for tokens that end generation: EOS, EOT, and control tokens that end a chat turn
  // (<|eot_id|>, <|eom_id|>, <|im_end|>, <|end|>, <end_of_turn>).
  virtual bool is_end_of_generation(TokenId id) const = 0;
  // Every token id for which is_end_of_generation() is true: the engine stops a request on them.
  virtual std::vector<TokenId> stop_token_ids() const = 0;
  // Looks a token up by its stored text; -1 if absent.
  virtual TokenId find_token(std::string_view text) const = 0;
};

// The vocabulary's text tokens, most frequent first as far as the vocabulary itself tells: a
// SentencePiece vocabulary by descending score (its pieces' log-probabilities or merge priorities),
// a byte-level BPE vocabulary by id (its ids follow merge order, and earlier merges are of more
// frequent pairs). Control, unused, unknown and undefined tokens are left out. For a draft model's
// head over the most frequent tokens (spec/draft_head.h).
std::vector<TokenId> tokens_by_frequency(const VocabData& vocab);

// Turns a stream of token ids into text without ever emitting half a UTF-8 character: bytes of an
// incomplete character are held until the next token completes them.
//
// For SentencePiece vocabs with add_space_prefix, a token that starts the stream or directly follows
// BOS loses its leading space (the space the encoder added), as SentencePiece and llama2.c do. When
// the stream continues a prompt, prime() it with the prompt's last token so that the first
// generated token is treated as following that token (and keeps its space unless it was BOS).
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool render_special = false);
  // Records `id` as the token already seen before the stream, without emitting anything.
  void prime(TokenId id);
  // Appends one token; returns the newly completed text (possibly empty).
  std::string push(TokenId id);
  // Returns whatever is held back (an incomplete character at the very end, emitted as is).
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  bool strips_space_after_bos_;  // SPM with add_space_prefix
  TokenId previous_ = -1;        // -1: nothing seen yet
  std::string pending_;          // bytes of an incomplete UTF-8 character
};

}  // namespace kestrel
