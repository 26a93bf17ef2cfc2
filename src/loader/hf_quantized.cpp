#include "loader/hf_quantized.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/half.h"
#include "quant/blocks.h"
#include "quant/fp8.h"

namespace kestrel {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Reading the checkpoint's tensors.

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

class Tensors {
 public:
  Tensors(const safetensors::SafetensorsModel& st, std::string module, std::string what)
      : st_(st), module_(std::move(module)), what_(std::move(what)) {}

  const safetensors::Tensor* find(const std::string& suffix) const { return st_.find(module_ + "." + suffix); }
  const safetensors::Tensor& need(const std::string& suffix, const char* expected) const {
    const safetensors::Tensor* t = find(suffix);
    if (t == nullptr) fail("missing tensor '{}.{}' ({} expects {})", module_, suffix, what_, expected);
    return *t;
  }
  // The tensor with its dtype among `dtypes` and its shape `shape`, or an error saying what was expected.
  const safetensors::Tensor& need(const std::string& suffix, const char* expected, std::initializer_list<const char*> dtypes,
                                  const std::vector<int64_t>& shape) const {
    const safetensors::Tensor& t = need(suffix, expected);
    check(t, dtypes, shape);
    return t;
  }
  void check(const safetensors::Tensor& t, std::initializer_list<const char*> dtypes, const std::vector<int64_t>& shape) const {
    const bool dtype_ok = std::any_of(dtypes.begin(), dtypes.end(), [&](const char* d) { return t.dtype == d; });
    if (!dtype_ok || t.shape != shape) {
      fail("tensor '{}' is {} {}; {} of this {} layer expects {} {}", t.name, t.dtype, shape_text(t.shape), what_,
           module_, fmt::join(dtypes, "/"), shape_text(shape));
    }
  }
  const std::string& module() const { return module_; }
  const std::string& what() const { return what_; }

 private:
  const safetensors::SafetensorsModel& st_;
  std::string module_;
  std::string what_;
};

int32_t i32_at(const safetensors::Tensor& t, int64_t i) {
  int32_t v;
  std::memcpy(&v, t.data + 4 * i, 4);
  return v;
}
int64_t int_at(const safetensors::Tensor& t, int64_t i) {
  if (t.dtype == "I64") {
    int64_t v;
    std::memcpy(&v, t.data + 8 * i, 8);
    return v;
  }
  return i32_at(t, i);
}

// Field `slot` (bits wide, from bit bits * slot) of int32 word `index` of a packed I32 tensor:
// GPTQ, AWQ and compressed-tensors all pack sub-byte values this way within a word.
int32_t packed_field(const safetensors::Tensor& t, int64_t index, int64_t slot, int bits) {
  return int32_t((uint32_t(i32_at(t, index)) >> (bits * slot)) & ((uint32_t(1) << bits) - 1));
}

// ---------------------------------------------------------------------------------------------
// A linear layer's integer codes, whatever the packing: x[r][c] = scale[r][g] * (q[r][c] - zero[r][g]),
// g = g_idx[c].
struct Codes {
  Codes(int64_t rows_, int64_t cols_, int bits_) : rows(rows_), cols(cols_), bits(bits_) {}
  int64_t rows = 0, cols = 0, groups = 0;
  int bits = 0;
  std::vector<uint8_t> q;      // [rows][cols] unsigned levels
  std::vector<float> scale;    // [rows][groups]
  std::vector<int32_t> zero;   // [rows][groups]
  std::vector<int32_t> g_idx;  // [cols]
  float value(int64_t r, int64_t c) const {
    const int64_t g = g_idx[size_t(c)];
    return scale[size_t(r * groups + g)] * float(int32_t(q[size_t(r * cols + c)]) - zero[size_t(r * groups + g)]);
  }
};

int64_t groups_of(int64_t cols, int64_t group_size) { return group_size > 0 ? (cols + group_size - 1) / group_size : 1; }

// g_idx from the checkpoint (act-order) or column / group_size.
std::vector<int32_t> read_g_idx(const Tensors& ts, const char* name, int64_t cols, int64_t group_size, int64_t groups) {
  std::vector<int32_t> g_idx(static_cast<size_t>(cols));
  const safetensors::Tensor* t = ts.find(name);
  if (t == nullptr) {
    for (int64_t c = 0; c < cols; ++c) g_idx[size_t(c)] = group_size > 0 ? int32_t(c / group_size) : 0;
    return g_idx;
  }
  ts.check(*t, {"I32", "I64"}, {cols});
  for (int64_t c = 0; c < cols; ++c) {
    const int64_t g = int_at(*t, c);
    if (g < 0 || g >= groups) fail("tensor '{}': entry {} is group {}, but there are {} groups", t->name, c, g, groups);
    g_idx[size_t(c)] = int32_t(g);
  }
  return g_idx;
}

// AutoGPTQ / GPTQModel: qweight I32 [cols * bits / 32][rows], value j of a word at bits j * bits
// (input channel 32 / bits * i + j); qzeros I32 [groups][rows * bits / 32] packed the same way
// along the output channels; scales [groups][rows]; g_idx [cols].
Codes read_gptq(const Tensors& ts, const HfQuantization& q, int64_t rows, int64_t cols) {
  Codes k(rows, cols, q.bits);
  const int64_t per_word = 32 / q.bits;
  if (cols % per_word != 0 || rows % per_word != 0) {
    fail("{} layer {} is {} x {}; {} packs {} values per int32, so both must be multiples of it", ts.what(),
         ts.module(), rows, cols, ts.what(), per_word);
  }
  k.groups = groups_of(cols, q.group_size);
  const char* expected = "qweight, qzeros, scales (and g_idx)";
  const auto& qweight = ts.need("qweight", expected, {"I32"}, {cols / per_word, rows});
  const auto& qzeros = ts.need("qzeros", expected, {"I32"}, {k.groups, rows / per_word});
  const auto& scales = ts.need("scales", expected, {"F16", "BF16", "F32"}, {k.groups, rows});
  k.g_idx = read_g_idx(ts, "g_idx", cols, q.group_size, k.groups);
  k.q.resize(size_t(rows * cols));
  for (int64_t i = 0; i < cols / per_word; ++i) {  // qweight in storage order
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < per_word; ++j) {
        k.q[size_t(r * cols + i * per_word + j)] = uint8_t(packed_field(qweight, i * rows + r, j, q.bits));
      }
    }
  }
  k.scale.resize(size_t(rows * k.groups));
  k.zero.resize(size_t(rows * k.groups));
  for (int64_t g = 0; g < k.groups; ++g) {
    for (int64_t r = 0; r < rows; ++r) {
      // v1 stores z - 1; AutoGPTQ's kernels add the 1 back after masking (a stored 2^bits - 1 is 2^bits).
      const int32_t stored = packed_field(qzeros, g * (rows / per_word) + r / per_word, r % per_word, q.bits);
      k.zero[size_t(r * k.groups + g)] = stored + (q.gptq_v1_zeros ? 1 : 0);
      k.scale[size_t(r * k.groups + g)] = scales.float_at(g * rows + r);
    }
  }
  return k;
}

// AutoAWQ GEMM: qweight I32 [cols][rows / 8], nibble n of a word holding output channel
// 8 w + kOrder[n] (kOrder = 0 2 4 6 1 3 5 7); qzeros I32 [groups][rows / 8] likewise; scales [groups][rows].
Codes read_awq(const Tensors& ts, const HfQuantization& q, int64_t rows, int64_t cols) {
  constexpr int kNibbleOf[8] = {0, 4, 1, 5, 2, 6, 3, 7};  // the nibble holding channel 8 w + i
  Codes k(rows, cols, 4);
  if (rows % 8 != 0) fail("AWQ layer {} has {} output channels; AWQ packs 8 per int32", ts.module(), rows);
  k.groups = groups_of(cols, q.group_size);
  const char* expected = "qweight, qzeros, scales";
  const auto& qweight = ts.need("qweight", expected, {"I32"}, {cols, rows / 8});
  const auto& qzeros = ts.need("qzeros", expected, {"I32"}, {k.groups, rows / 8});
  const auto& scales = ts.need("scales", expected, {"F16", "BF16", "F32"}, {k.groups, rows});
  k.g_idx = read_g_idx(ts, "g_idx", cols, q.group_size, k.groups);  // AWQ has none: column / group
  auto nibble = [&](const safetensors::Tensor& t, int64_t row_of_t, int64_t r) {
    return packed_field(t, row_of_t * (rows / 8) + r / 8, kNibbleOf[r % 8], 4);
  };
  k.q.resize(size_t(rows * cols));
  for (int64_t c = 0; c < cols; ++c) {
    for (int64_t r = 0; r < rows; ++r) k.q[size_t(r * cols + c)] = uint8_t(nibble(qweight, c, r));
  }
  k.scale.resize(size_t(rows * k.groups));
  k.zero.resize(size_t(rows * k.groups));
  for (int64_t g = 0; g < k.groups; ++g) {
    for (int64_t r = 0; r < rows; ++r) {
      k.zero[size_t(r * k.groups + g)] = nibble(qzeros, g, r);
      k.scale[size_t(r * k.groups + g)] = scales.float_at(g * rows + r);
    }
  }
  return k;
}

// compressed-tensors pack-quantized: weight_packed I32 [rows][cols * bits / 32], value c at bit
// bits * c of the row's words, stored + 2^(bits-1) (signed levels); weight_scale [rows][groups];
// asymmetric: weight_zero_point I32 [rows * bits / 32][groups] packed along the rows the same way;
// weight_g_idx [cols] for act-order; weight_shape = {rows, cols}.
Codes read_packed(const Tensors& ts, const HfQuantization& q, int64_t rows, int64_t cols) {
  Codes k(rows, cols, q.bits);
  const int64_t per_word = 32 / q.bits, offset = int64_t(1) << (q.bits - 1);
  const char* expected = q.symmetric ? "weight_packed, weight_scale, weight_shape"
                                     : "weight_packed, weight_scale, weight_zero_point, weight_shape";
  const auto& packed = ts.need("weight_packed", expected, {"I32"}, {rows, (cols + per_word - 1) / per_word});
  const auto& shape = ts.need("weight_shape", expected);
  if (shape.shape != std::vector<int64_t>{2} || (shape.dtype != "I64" && shape.dtype != "I32") ||
      int_at(shape, 0) != rows || int_at(shape, 1) != cols) {
    fail("tensor '{}' must hold the layer's shape [{}, {}]", shape.name, rows, cols);
  }
  const auto& scales = ts.need("weight_scale", expected);
  // As the strategy says: group (scale [rows][groups]), channel ([rows][1]) or tensor ([1] or []).
  const bool per_tensor = q.strategy == "tensor";
  k.groups = per_tensor ? 1 : groups_of(cols, q.group_size);
  if (per_tensor) {
    if (scales.num_elements() != 1) fail("tensor '{}' is {}; a per-tensor scale is one value", scales.name, shape_text(scales.shape));
    ts.check(scales, {"F16", "BF16", "F32"}, scales.shape);
  } else {
    ts.check(scales, {"F16", "BF16", "F32"}, {rows, k.groups});
  }
  k.g_idx = read_g_idx(ts, "weight_g_idx", cols, q.group_size, k.groups);
  k.q.resize(size_t(rows * cols));
  const int64_t words = packed.shape[1];
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      k.q[size_t(r * cols + c)] = uint8_t(packed_field(packed, r * words + c / per_word, c % per_word, q.bits));
    }
  }
  k.scale.resize(size_t(rows * k.groups));
  k.zero.assign(size_t(rows * k.groups), int32_t(offset));
  for (int64_t i = 0; i < rows * k.groups; ++i) k.scale[size_t(i)] = scales.float_at(per_tensor ? 0 : i);
  if (!q.symmetric) {
    const auto& zp = ts.need("weight_zero_point", expected, {"I32"}, {(rows + per_word - 1) / per_word, k.groups});
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t g = 0; g < k.groups; ++g) {
        k.zero[size_t(r * k.groups + g)] = packed_field(zp, (r / per_word) * k.groups + g, r % per_word, q.bits);
      }
    }
  }
  return k;
}

// ---------------------------------------------------------------------------------------------
// Writing Kestrel tensors.

QuantizedLinear make_tensor(const std::string& name, DType type, int64_t rows, int64_t cols, std::vector<uint8_t> bytes) {
  QuantizedLinear out;
  out.owned = std::make_shared<std::vector<uint8_t>>(std::move(bytes));
  out.weight.name = name;
  out.weight.type = type;
  out.weight.dims = {cols, rows};
  out.weight.data = out.owned->data();
  out.weight.num_bytes = out.owned->size();
  return out;
}

// x[r][c] as F32 (exact for these codes: at most 8 + 11 significant bits).
template <class Value>
QuantizedLinear f32_tensor(const std::string& name, int64_t rows, int64_t cols, const std::vector<int64_t>& row_order,
                           Value value, std::string why) {
  std::vector<uint8_t> bytes(size_t(rows * cols) * 4);
  auto* out = reinterpret_cast<float*>(bytes.data());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = row_order.empty() ? r : row_order[size_t(r)];
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = value(src, c);
  }
  QuantizedLinear t = make_tensor(name, DType::F32, rows, cols, std::move(bytes));
  t.fallback = std::move(why);
  return t;
}

// Row r of the result is row row_order[r] of `k` (Llama's Q/K RoPE permutation); empty: as is.
void reorder_rows(Codes& k, const std::vector<int64_t>& row_order) {
  if (row_order.empty()) return;
  auto permute = [&](auto& v, int64_t width) {
    auto out = v;
    for (int64_t r = 0; r < k.rows; ++r) {
      std::copy_n(v.begin() + row_order[size_t(r)] * width, width, out.begin() + r * width);
    }
    v = std::move(out);
  };
  permute(k.q, k.cols);
  permute(k.scale, k.groups);
  permute(k.zero, k.groups);
}

// INT4_ZP_G{G} rows (quant/blocks.h) of `k`, columns in `order`; false if a group's scale or zero
// does not fit the scale word (quant::zp_pack).
template <int G>
bool pack_int4_zp(const Codes& k, const std::vector<int32_t>& order, std::vector<uint8_t>& bytes) {
  const int64_t blocks = k.cols / G;
  bytes.assign(size_t(k.rows * blocks) * sizeof(quant::BlockInt4Zp<G>), 0);
  auto* out = reinterpret_cast<quant::BlockInt4Zp<G>*>(bytes.data());
  uint8_t levels[G];
  for (int64_t r = 0; r < k.rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t g = k.g_idx[size_t(order[size_t(b * G)])];  // the block's group (blocks lie in one)
      quant::BlockInt4Zp<G>& block = out[r * blocks + b];
      if (!quant::zp_pack(k.scale[size_t(r * k.groups + g)], k.zero[size_t(r * k.groups + g)], &block.scale_zero)) {
        return false;
      }
      for (int i = 0; i < G; ++i) levels[i] = k.q[size_t(r * k.cols + order[size_t(b * G + i)])];
      quant::pack_group_levels<G, 4>(levels, block.qs);
    }
  }
  return true;
}

// Q8_0 rows of symmetric 8-bit codes (z = 128, q - 128 as int8, d = the scale); false unless every
// zero is 128 and every scale an F16 value.
bool pack_q8_0(const Codes& k, const std::vector<int32_t>& order, std::vector<uint8_t>& bytes) {
  const int64_t blocks = k.cols / quant::kQ8_0BlockSize;
  bytes.assign(size_t(k.rows * blocks) * sizeof(quant::BlockQ8_0), 0);
  auto* out = reinterpret_cast<quant::BlockQ8_0*>(bytes.data());
  for (int64_t r = 0; r < k.rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t first = b * quant::kQ8_0BlockSize;
      const int64_t g = k.g_idx[size_t(order[size_t(first)])];
      const float s = k.scale[size_t(r * k.groups + g)];
      quant::BlockQ8_0& block = out[r * blocks + b];
      block.d = float_to_fp16(s);
      if (k.zero[size_t(r * k.groups + g)] != 128 || fp16_to_float(block.d) != s) return false;
      for (int i = 0; i < quant::kQ8_0BlockSize; ++i) {
        block.qs[i] = int8_t(int32_t(k.q[size_t(r * k.cols + order[size_t(first + i)])]) - 128);
      }
    }
  }
  return true;
}

// The Kestrel encoding of `k`: columns sorted by group if g_idx is not already in order, then
// INT4_ZP / Q8_0 blocks of the largest size whose every block lies in one group; F32 (exact) when
// no format holds the codes.
QuantizedLinear encode(Codes k, const std::string& name, const std::vector<int64_t>& row_order) {
  reorder_rows(k, row_order);
  // order[c'] = the checkpoint column at position c' (stable sort by group: identity when in order).
  std::vector<int32_t> order(static_cast<size_t>(k.cols));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return k.g_idx[size_t(a)] < k.g_idx[size_t(b)]; });
  auto group_at = [&](int64_t c) { return k.g_idx[size_t(order[size_t(c)])]; };
  int64_t block = 0;
  for (int64_t b : {128, 64, 32}) {
    if (k.cols % b != 0) continue;
    bool fits = true;
    for (int64_t c = 0; c < k.cols && fits; ++c) fits = group_at(c) == group_at(c - c % b);
    if (fits) {
      block = b;
      break;
    }
  }
  const std::string shape = fmt::format("{} x {}", k.rows, k.cols);
  auto as_f32 = [&](const std::string& why) {
    return f32_tensor(name, k.rows, k.cols, {}, [&](int64_t r, int64_t c) { return k.value(r, c); },
                      fmt::format("{}: {}", shape, why));
  };
  if (block == 0) return as_f32("its groups do not fall on blocks of 32 columns");
  std::vector<uint8_t> bytes;
  DType type;
  if (k.bits <= 4) {
    type = block == 128 ? DType::INT4_ZP_G128 : block == 64 ? DType::INT4_ZP_G64 : DType::INT4_ZP_G32;
    const bool packed = block == 128 ? pack_int4_zp<128>(k, order, bytes)
                        : block == 64 ? pack_int4_zp<64>(k, order, bytes)
                                      : pack_int4_zp<32>(k, order, bytes);
    if (!packed) return as_f32("a scale with more than 16 significant bits");
  } else {
    type = DType::Q8_0;
    if (!pack_q8_0(k, order, bytes)) return as_f32("8-bit with zero points or non-F16 scales");
  }
  QuantizedLinear t = make_tensor(name, type, k.rows, k.cols, std::move(bytes));
  if (!std::is_sorted(order.begin(), order.end())) {
    t.owned_order = std::make_shared<std::vector<uint8_t>>(size_t(k.cols) * 4);
    std::memcpy(t.owned_order->data(), order.data(), t.owned_order->size());
    gguf::TensorInfo info;
    info.name = input_order_tensor_name(name);
    info.type = DType::I32;
    info.dims = {k.cols};
    info.data = t.owned_order->data();
    info.num_bytes = t.owned_order->size();
    t.input_order = std::move(info);
  }
  return t;
}

// compressed-tensors float-quantized: weight F8_E4M3 [rows][cols], weight_scale one per tensor
// ([1] / []), per row ([rows][1]) or per block ([ceil(rows / b0)][ceil(cols / b1)]).
QuantizedLinear read_fp8(const Tensors& ts, const HfQuantization& q, const std::string& name, int64_t rows,
                         int64_t cols, const std::vector<int64_t>& row_order) {
  const char* expected = "weight (F8_E4M3) and weight_scale";
  const auto& w = ts.need("weight", expected, {"F8_E4M3"}, {rows, cols});
  const auto& scales = ts.need("weight_scale", expected);
  // The strategy fixes the scale's shape: tensor [1] / [], channel [rows][1], block (b0 x b1 from
  // block_structure) [ceil(rows / b0)][ceil(cols / b1)].
  int64_t block_rows = rows, block_cols = cols;
  if (q.strategy == "tensor") {
    if (scales.num_elements() != 1) fail("tensor '{}' is {}; a per-tensor scale is one value", scales.name, shape_text(scales.shape));
    ts.check(scales, {"F16", "BF16", "F32"}, scales.shape);
  } else if (q.strategy == "channel") {
    block_rows = 1;
    ts.check(scales, {"F16", "BF16", "F32"}, {rows, 1});
  } else {
    block_rows = q.block_rows, block_cols = q.block_cols;
    ts.check(scales, {"F16", "BF16", "F32"}, {(rows + block_rows - 1) / block_rows, (cols + block_cols - 1) / block_cols});
  }
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  auto scale = [&](int64_t r, int64_t c) { return scales.float_at((r / block_rows) * scale_cols + c / block_cols); };
  if (scale_cols != 1) {  // scales vary along a row: no per-row format holds it
    return f32_tensor(name, rows, cols, row_order,
                      [&](int64_t r, int64_t c) { return scale(r, c) * quant::kE4M3ToFloat[w.data[r * cols + c]]; },
                      fmt::format("{} x {}: FP8 with block scales along the row", rows, cols));
  }
  // FP8_E4M3_PC: per row an F32 scale, then the E4M3 bytes.
  std::vector<uint8_t> bytes(size_t(rows * (4 + cols)));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t src = row_order.empty() ? r : row_order[size_t(r)];
    const float s = scale(src, 0);
    std::memcpy(bytes.data() + r * (4 + cols), &s, 4);
    std::memcpy(bytes.data() + r * (4 + cols) + 4, w.data + src * cols, size_t(cols));
  }
  return make_tensor(name, DType::FP8_E4M3_PC, rows, cols, std::move(bytes));
}

// ---------------------------------------------------------------------------------------------
// quantization_config.

int bits_of(const json& j, const char* key, const std::string& path) {
  if (!j.contains(key) || !j[key].is_number_integer()) fail("{}: quantization_config has no integer '{}'", path, key);
  return j[key].get<int>();
}
// A setting that may be missing or null (both mean the default); any other type is an error.
std::string str_or(const std::string& path, const json& j, const char* key, const std::string& fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_string()) fail("{}: quantization_config key '{}' must be a string", path, key);
  return j[key].get<std::string>();
}
bool bool_or(const std::string& path, const json& j, const char* key, bool fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_boolean()) fail("{}: quantization_config key '{}' must be true or false", path, key);
  return j[key].get<bool>();
}

int64_t group_size_of(const std::string& path, const json& j, const char* key) {
  if (!j.contains(key) || j[key].is_null()) return 0;
  if (!j[key].is_number_integer()) fail("{}: quantization_config key '{}' must be an integer", path, key);
  const int64_t g = j[key].get<int64_t>();
  return g > 0 ? g : 0;  // -1: per output channel
}

HfQuantization parse_compressed_tensors(const json& qc, const std::string& path) {
  HfQuantization q;
  const std::string format = str_or(path, qc, "format", "");
  if (format == "pack-quantized") {
    q.method = HfQuantization::Method::PackedInt;
  } else if (format == "float-quantized" || format == "naive-quantized") {
    q.method = HfQuantization::Method::Fp8;
  } else {
    fail("{}: compressed-tensors format '{}' is not supported (pack-quantized, float-quantized)", path, format);
  }
  if (!qc.contains("config_groups") || !qc["config_groups"].is_object() || qc["config_groups"].empty()) {
    fail("{}: compressed-tensors quantization_config has no config_groups", path);
  }
  const json* weights = nullptr;
  for (const auto& [group_name, group] : qc["config_groups"].items()) {
    if (!group.contains("weights") || !group["weights"].is_object()) {
      fail("{}: config group '{}' has no weights settings", path, group_name);
    }
    if (weights != nullptr && *weights != group["weights"]) {
      fail("{}: config groups with different weight settings are not supported", path);
    }
    weights = &group["weights"];
  }
  const json& w = *weights;
  q.bits = bits_of(w, "num_bits", path);
  q.symmetric = bool_or(path, w, "symmetric", true);
  const std::string type = str_or(path, w, "type", "int");
  const std::string strategy = str_or(path, w, "strategy", "tensor");
  q.strategy = strategy;
  if (q.method == HfQuantization::Method::PackedInt) {
    if (type != "int" || (q.bits != 4 && q.bits != 8)) {
      fail("{}: pack-quantized {} {}-bit weights are not supported (int 4 or 8 bits)", path, type, q.bits);
    }
    if (strategy == "group") {
      q.group_size = group_size_of(path, w, "group_size");
      if (q.group_size == 0) fail("{}: group strategy without a group_size", path);
    } else if (strategy != "channel" && strategy != "tensor") {
      fail("{}: pack-quantized strategy '{}' is not supported (group, channel, tensor)", path, strategy);
    }
    q.description = fmt::format("compressed-tensors pack-quantized INT{} {}, {}", q.bits,
                                q.group_size > 0 ? fmt::format("groups of {}", q.group_size) : strategy,
                                q.symmetric ? "symmetric" : "zero points");
  } else {
    if (type != "float" || q.bits != 8) fail("{}: float-quantized {} {}-bit weights are not supported (FP8 E4M3)", path, type, q.bits);
    if (strategy == "block") {
      const json& b = w.contains("block_structure") ? w["block_structure"] : json();
      if (!b.is_array() || b.size() != 2 || !b[0].is_number_integer() || !b[1].is_number_integer() ||
          b[0].get<int64_t>() <= 0 || b[1].get<int64_t>() <= 0) {
        fail("{}: FP8 block strategy needs block_structure [rows, cols] (positive integers)", path);
      }
      q.block_rows = b[0].get<int64_t>(), q.block_cols = b[1].get<int64_t>();
    } else if (strategy != "channel" && strategy != "tensor") {
      fail("{}: float-quantized strategy '{}' is not supported (tensor, channel, block)", path, strategy);
    }
    q.description = fmt::format("compressed-tensors FP8 E4M3 per {}", strategy);
  }
  return q;
}

}  // namespace

HfQuantization parse_hf_quantization(const json& config, const std::string& folder) {
  const std::string config_path = (fs::path(folder) / "config.json").string();
  json qc;
  std::string path = config_path;
  if (config.contains("quantization_config") && config["quantization_config"].is_object()) {
    qc = config["quantization_config"];
  } else if (const fs::path old = fs::path(folder) / "quantize_config.json"; fs::exists(old)) {
    // AutoGPTQ before transformers' integration wrote its settings beside config.json.
    std::ifstream in(old);
    try {
      qc = json::parse(in);
    } catch (const json::exception& e) {
      fail("{}: not valid JSON: {}", old.string(), e.what());
    }
    path = old.string();
    if (!qc.contains("quant_method")) qc["quant_method"] = "gptq";
  } else {
    return {};
  }
  const std::string method = str_or(path, qc, "quant_method", "");
  HfQuantization q;
  if (method == "gptq") {
    q.method = HfQuantization::Method::Gptq;
    q.bits = bits_of(qc, "bits", path);
    if (q.bits != 2 && q.bits != 4 && q.bits != 8) {
      fail("{}: GPTQ {}-bit is not supported (2, 4 or 8 bits; 3-bit packs values across words)", path, q.bits);
    }
    q.group_size = group_size_of(path, qc, "group_size");
    q.symmetric = bool_or(path, qc, "sym", true);
    const std::string format = str_or(path, qc, "checkpoint_format", str_or(path, qc, "format", "gptq"));
    if (format != "gptq" && format != "gptq_v2") {
      fail("{}: GPTQ checkpoint_format '{}' is not supported (gptq, gptq_v2)", path, format);
    }
    q.gptq_v1_zeros = format == "gptq";
    q.description = fmt::format("GPTQ {}-bit, {}{}, {} zeros", q.bits,
                                q.group_size > 0 ? fmt::format("groups of {}", q.group_size) : "per channel",
                                bool_or(path, qc, "desc_act", false) ? ", act-order" : "", q.gptq_v1_zeros ? "v1" : "v2");
  } else if (method == "awq") {
    q.method = HfQuantization::Method::Awq;
    q.bits = qc.contains("bits") ? bits_of(qc, "bits", path) : bits_of(qc, "w_bit", path);
    q.group_size = group_size_of(path, qc, qc.contains("group_size") ? "group_size" : "q_group_size");
    const std::string version = str_or(path, qc, "version", "gemm");
    if (q.bits != 4) fail("{}: AWQ {}-bit is not supported (4 bits)", path, q.bits);
    if (version != "gemm" && version != "GEMM") fail("{}: AWQ version '{}' is not supported (gemm)", path, version);
    if (!bool_or(path, qc, "zero_point", true)) fail("{}: AWQ without zero points is not supported", path);
    q.symmetric = false;
    q.description = fmt::format("AWQ GEMM 4-bit, groups of {}", q.group_size);
  } else if (method == "compressed-tensors") {
    q = parse_compressed_tensors(qc, path);
  } else {
    fail("{}: quant_method '{}' is not supported (gptq, awq, compressed-tensors)", path, method);
  }
  return q;
}

std::string input_order_tensor_name(const std::string& matrix_name) {
  const bool weight = matrix_name.ends_with(".weight");
  return matrix_name.substr(0, matrix_name.size() - (weight ? 7 : 0)) + ".input_order";
}

bool stores_quantized(const safetensors::SafetensorsModel& st, const HfQuantization& q, const std::string& module) {
  using Method = HfQuantization::Method;
  const safetensors::Tensor* weight = st.find(module + ".weight");
  switch (q.method) {
    case Method::Gptq:
    case Method::Awq: return st.find(module + ".qweight") != nullptr;
    case Method::PackedInt: return st.find(module + ".weight_packed") != nullptr;
    case Method::Fp8: return weight != nullptr && !weight->float_type().has_value();
    case Method::None: break;
  }
  return false;
}

std::optional<QuantizedLinear> load_quantized_linear(const safetensors::SafetensorsModel& st, const HfQuantization& q,
                                                     const std::string& module, const std::string& gguf_name,
                                                     int64_t rows, int64_t cols, const std::vector<int64_t>& row_order,
                                                     const std::string& folder) {
  using Method = HfQuantization::Method;
  const char* what = q.method == Method::Gptq ? "GPTQ" : q.method == Method::Awq ? "AWQ" : "compressed-tensors";
  const Tensors ts(st, module, what);
  const safetensors::Tensor* weight = ts.find("weight");
  if (q.method == Method::None || (weight != nullptr && weight->float_type().has_value())) return std::nullopt;
  try {
    switch (q.method) {
      case Method::Gptq: return encode(read_gptq(ts, q, rows, cols), gguf_name, row_order);
      case Method::Awq: return encode(read_awq(ts, q, rows, cols), gguf_name, row_order);
      case Method::PackedInt: return encode(read_packed(ts, q, rows, cols), gguf_name, row_order);
      case Method::Fp8: return read_fp8(ts, q, gguf_name, rows, cols, row_order);
      case Method::None: break;
    }
  } catch (const Error& e) {
    fail("{}: {}", folder, e.what());
  }
  return std::nullopt;
}

}  // namespace kestrel
