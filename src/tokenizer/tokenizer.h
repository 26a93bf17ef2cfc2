// Tokenizers built from GGUF metadata: SentencePiece-style ("llama": scores, byte fallback, the
// U+2581 space) and byte-level BPE ("gpt2": merges or tiktoken ranks, pre-tokenizer regexes per
// tokenizer.ggml.pre). Special tokens are matched in the text when parse_special is set.
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

enum class VocabKind { SentencePiece, BytePairEncoding };

// Everything a tokenizer needs, as read from GGUF metadata (or a tiktoken file).
struct VocabData {
  VocabKind kind = VocabKind::SentencePiece;
  std::string pre = "default";            // tokenizer.ggml.pre
  std::vector<std::string> tokens;        // as stored: SPM pieces use U+2581 for space; BPE pieces
                                          // use GPT-2's byte-to-unicode alphabet
  std::vector<float> scores;              // SPM merge priorities (may be empty for BPE)
  std::vector<TokenType> types;           // empty means all Normal
  std::vector<std::string> merges;        // BPE "left right" pairs in rank order
  TokenId bos_id = -1, eos_id = -1, unk_id = -1, pad_id = -1, eot_id = -1;
  bool add_bos = false;
  bool add_eos = false;
  bool add_space_prefix = true;           // SPM only
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
  // or "<|eot_id|>" becomes that special token instead of being tokenized as text.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_special,
                                      bool parse_special) const = 0;

  // The raw bytes a token stands for (SPM: U+2581 -> ' ', <0xNN> -> byte; BPE: byte alphabet
  // decoded). Control tokens give their text only when render_special is set.
  virtual std::string token_to_piece(TokenId id, bool render_special) const = 0;

  // Decodes a whole sequence. For SPM with add_space_prefix, the single leading space that the
  // encoder added is removed, so decode(encode(s)) == s.
  virtual std::string decode(std::span<const TokenId> ids, bool render_special) const = 0;

  virtual const VocabData& vocab() const = 0;
  int32_t vocab_size() const { return int32_t(vocab().tokens.size()); }
  TokenId bos_id() const { return vocab().bos_id; }
  TokenId eos_id() const { return vocab().eos_id; }
  // True for tokens that end generation (EOS, EOT such as <|eot_id|>).
  virtual bool is_end_of_generation(TokenId id) const = 0;
  // Looks a token up by its stored text; -1 if absent.
  virtual TokenId find_token(std::string_view text) const = 0;
};

// Turns a stream of token ids into text without ever emitting half a UTF-8 character: bytes of an
// incomplete character are held until the next token completes them.
class StreamingDetokenizer {
 public:
  explicit StreamingDetokenizer(const Tokenizer& tokenizer, bool render_special = false);
  // Appends one token; returns the newly completed text (possibly empty).
  std::string push(TokenId id);
  // Returns whatever is held back (an incomplete character at the very end, emitted as is).
  std::string flush();

 private:
  const Tokenizer& tokenizer_;
  bool render_special_;
  bool at_start_ = true;
  TokenId previous_ = -1;
  std::string pending_;
};

}  // namespace kestrel
