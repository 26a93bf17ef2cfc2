#include "tokenizer/special_tokens.h"

#include <algorithm>

namespace kestrel::tokenizer {

SpecialTokenSplitter::SpecialTokenSplitter(const VocabData& vocab) {
  for (size_t i = 0; i < vocab.types.size(); ++i) {
    const TokenType type = vocab.types[i];
    const bool control_like = type == TokenType::Control || type == TokenType::Unknown;
    if (!control_like && type != TokenType::UserDefined) continue;
    if (vocab.tokens[i].empty()) continue;
    candidates_.push_back({TokenId(i), vocab.tokens[i], control_like});
  }
  std::stable_sort(candidates_.begin(), candidates_.end(),
                   [](const Candidate& a, const Candidate& b) { return a.text.size() > b.text.size(); });
}

namespace {

// Splits every text fragment of `fragments` on occurrences of `special`.
void split_on(const std::string& special, TokenId id, std::vector<Fragment>& fragments) {
  const bool any = std::any_of(fragments.begin(), fragments.end(), [&](const Fragment& f) {
    return !f.is_token() && f.text.find(special) != std::string_view::npos;
  });
  if (!any) return;
  std::vector<Fragment> result;
  result.reserve(fragments.size() + 2);
  for (const Fragment& fragment : fragments) {
    if (fragment.is_token()) {
      result.push_back(fragment);
      continue;
    }
    std::string_view rest = fragment.text;
    size_t match;
    while ((match = rest.find(special)) != std::string_view::npos) {
      if (match > 0) result.push_back({rest.substr(0, match), -1});
      result.push_back({std::string_view(), id});
      rest.remove_prefix(match + special.size());
    }
    if (!rest.empty()) result.push_back({rest, -1});
  }
  fragments.swap(result);
}

}  // namespace

std::vector<Fragment> SpecialTokenSplitter::split(std::string_view text, bool parse_special) const {
  std::vector<Fragment> fragments;
  if (text.empty()) return fragments;
  fragments.push_back({text, -1});
  for (const Candidate& candidate : candidates_) {
    if (candidate.needs_parse_special && !parse_special) continue;
    split_on(candidate.text, candidate.id, fragments);
  }
  return fragments;
}

}  // namespace kestrel::tokenizer
