#include "runner/step_message.h"

#include <cstring>

#include "core/error.h"

namespace kestrel {
namespace {

class Writer {
 public:
  template <typename T>
  void vector(const std::vector<T>& v) {
    scalar(uint64_t(v.size()));
    append(v.data(), v.size() * sizeof(T));
  }
  template <typename T>
  void scalar(T value) {
    append(&value, sizeof(T));
  }
  std::vector<std::byte> take() { return std::move(bytes_); }

 private:
  void append(const void* data, size_t n) {
    const auto* p = static_cast<const std::byte*>(data);
    bytes_.insert(bytes_.end(), p, p + n);
  }
  std::vector<std::byte> bytes_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::byte> bytes) : bytes_(bytes) {}
  template <typename T>
  std::vector<T> vector() {
    const auto n = scalar<uint64_t>();
    if (n > (bytes_.size() - offset_) / sizeof(T)) fail("a step message from rank 0 is malformed");
    std::vector<T> v(static_cast<size_t>(n));
    take(v.data(), v.size() * sizeof(T));
    return v;
  }
  template <typename T>
  T scalar() {
    T value{};
    take(&value, sizeof(T));
    return value;
  }
  bool done() const { return offset_ == bytes_.size(); }

 private:
  void take(void* out, size_t n) {
    if (n > bytes_.size() - offset_) fail("a step message from rank 0 is malformed");
    std::memcpy(out, bytes_.data() + offset_, n);
    offset_ += n;
  }
  std::span<const std::byte> bytes_;
  size_t offset_ = 0;
};

}  // namespace

std::vector<std::byte> encode_forward_batch(const ForwardBatch& batch) {
  Writer w;
  w.vector(batch.token_ids);
  w.vector(batch.positions);
  w.vector(batch.token_seq);
  w.vector(batch.logits_indices);
  w.scalar(uint64_t(batch.kv_groups.size()));
  for (const KvGroupBatch& g : batch.kv_groups) {
    w.vector(g.slot_mapping);
    w.vector(g.block_tables);
    w.scalar(g.max_blocks_per_seq);
  }
  return w.take();
}

ForwardBatch decode_forward_batch(std::span<const std::byte> payload) {
  Reader r(payload);
  ForwardBatch batch;
  batch.token_ids = r.vector<int32_t>();
  batch.positions = r.vector<int32_t>();
  batch.token_seq = r.vector<int32_t>();
  batch.logits_indices = r.vector<int32_t>();
  const auto groups = r.scalar<uint64_t>();
  if (groups > 64) fail("a step message from rank 0 is malformed");
  batch.kv_groups.resize(size_t(groups));
  for (KvGroupBatch& g : batch.kv_groups) {
    g.slot_mapping = r.vector<int64_t>();
    g.block_tables = r.vector<int32_t>();
    g.max_blocks_per_seq = r.scalar<int32_t>();
  }
  const size_t T = batch.token_ids.size();
  bool ok = r.done() && batch.positions.size() == T && batch.token_seq.size() == T;
  for (const KvGroupBatch& g : batch.kv_groups) ok = ok && g.slot_mapping.size() == T;
  if (!ok) fail("a step message from rank 0 is malformed");
  return batch;
}

ForwardBatch slice_forward_batch(const ForwardBatch& batch, int64_t begin, int64_t end) {
  ForwardBatch piece;
  auto cut = [&](const auto& v) { return std::vector(v.begin() + begin, v.begin() + end); };
  piece.token_ids = cut(batch.token_ids);
  piece.positions = cut(batch.positions);
  piece.token_seq = cut(batch.token_seq);
  for (const KvGroupBatch& g : batch.kv_groups) {
    KvGroupBatch& out = piece.kv_groups.emplace_back();
    out.slot_mapping = cut(g.slot_mapping);
    out.block_tables = g.block_tables;
    out.max_blocks_per_seq = g.max_blocks_per_seq;
  }
  for (int32_t row : batch.logits_indices) {
    if (row >= begin && row < end) piece.logits_indices.push_back(int32_t(row - begin));
  }
  return piece;
}

}  // namespace kestrel
