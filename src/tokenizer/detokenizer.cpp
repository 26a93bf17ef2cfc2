// StreamingDetokenizer: token ids in, whole UTF-8 characters out.
#include "core/utf8.h"
#include "tokenizer/tokenizer.h"

namespace kestrel {

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool render_special)
    : tokenizer_(tokenizer),
      render_special_(render_special),
      strips_space_after_bos_(tokenizer.vocab().kind == VocabKind::SentencePiece &&
                              tokenizer.vocab().add_space_prefix) {}

void StreamingDetokenizer::prime(TokenId id) { previous_ = id; }

std::string StreamingDetokenizer::push(TokenId id) {
  std::string piece = tokenizer_.token_to_piece(id, render_special_);
  // The space SentencePiece put in front of the text is not part of it: drop it from the first
  // token of the text, i.e. at the start of the stream or right after BOS (as decode() does).
  const bool starts_text = previous_ < 0 || previous_ == tokenizer_.bos_id();
  if (strips_space_after_bos_ && starts_text && id != tokenizer_.bos_id() && !piece.empty() &&
      piece.front() == ' ') {
    piece.erase(0, 1);
  }
  previous_ = id;
  pending_ += piece;
  const size_t complete = utf8_complete_prefix(pending_);
  std::string out = pending_.substr(0, complete);
  pending_.erase(0, complete);
  return out;
}

std::string StreamingDetokenizer::flush() {
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace kestrel
