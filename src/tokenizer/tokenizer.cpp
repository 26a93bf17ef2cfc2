// Tokenizer::create and from_gguf: check the vocabulary, then pick the algorithm by its kind.
#include "tokenizer/tokenizer.h"

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "tokenizer/bpe_tokenizer.h"
#include "tokenizer/spm_tokenizer.h"
#include "tokenizer/wpm_tokenizer.h"

namespace kestrel {

std::unique_ptr<Tokenizer> Tokenizer::create(VocabData vocab) {
  tokenizer::validate_vocab(vocab);
  switch (vocab.kind) {
    case VocabKind::SentencePiece:
      return std::make_unique<tokenizer::SpmTokenizer>(std::move(vocab));
    case VocabKind::BytePairEncoding:
      return std::make_unique<tokenizer::BpeTokenizer>(std::move(vocab));
    case VocabKind::WordPiece:
      return std::make_unique<tokenizer::WpmTokenizer>(std::move(vocab));
  }
  fail("tokenizer: unknown vocabulary kind {}", int(vocab.kind));
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::GgufFile& file) {
  VocabData vocab = vocab_from_gguf(file);
  try {
    return create(std::move(vocab));
  } catch (const Error& e) {
    fail("{}: {}", file.name(), e.what());
  }
}

}  // namespace kestrel
