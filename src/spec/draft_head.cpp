#include "spec/draft_head.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "quant/format.h"

namespace kestrel {

DraftHead::DraftHead(const WeightView& output, std::span<const TokenId> ids)
    : output_(output),
      row_bytes_(quant::row_bytes(quant::require_format(output.type), output.cols)),
      in_set_(size_t(output.rows), false) {
  add(ids);
  if (ids_.empty()) fail("a draft head needs at least one token");
}

void DraftHead::add(std::span<const TokenId> tokens) {
  const size_t before = ids_.size();
  for (TokenId id : tokens) {
    if (id < 0 || id >= output_.rows) fail("internal: draft head token {} outside the vocabulary of {}", id, output_.rows);
    if (in_set_[size_t(id)]) continue;
    in_set_[size_t(id)] = true;
    ids_.push_back(id);
  }
  if (ids_.size() == before) return;
  rows_.resize(ids_.size() * size_t(row_bytes_));
  const auto* source = static_cast<const uint8_t*>(output_.data);
  for (size_t j = before; j < ids_.size(); ++j) {
    std::memcpy(rows_.data() + int64_t(j) * row_bytes_, source + int64_t(ids_[j]) * row_bytes_, size_t(row_bytes_));
  }
  view_ = WeightView{output_.type, int64_t(ids_.size()), output_.cols, rows_.data()};
}

void DraftHead::scatter(std::span<const float> subset, std::span<float> full) const {
  if (subset.size() != ids_.size() || full.size() != in_set_.size()) {
    fail("internal: draft head scatter of {} logits into a row of {}", subset.size(), full.size());
  }
  std::fill(full.begin(), full.end(), -std::numeric_limits<float>::infinity());
  for (size_t j = 0; j < ids_.size(); ++j) full[size_t(ids_[j])] = subset[j];
}

std::vector<TokenId> draft_head_tokens(std::span<const TokenId> by_frequency, int64_t count,
                                       std::span<const TokenId> always) {
  std::vector<TokenId> ids(by_frequency.begin(),
                           by_frequency.begin() + std::min<int64_t>(std::max<int64_t>(count, 0), int64_t(by_frequency.size())));
  ids.insert(ids.end(), always.begin(), always.end());
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace kestrel
