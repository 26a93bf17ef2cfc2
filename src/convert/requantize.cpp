#include "convert/requantize.h"

#include <vector>

#include "core/error.h"
#include "core/progress.h"
#include "loader/gguf_reader.h"
#include "loader/gguf_writer.h"
#include "quant/format.h"

namespace kestrel {
namespace {

// llama.cpp's general.file_type values ("mostly X").
uint32_t file_type_of(DType target) {
  switch (target) {
    case DType::F32: return 0;
    case DType::F16: return 1;
    case DType::Q4_0: return 2;
    case DType::Q8_0: return 7;
    case DType::BF16: return 32;
    default: fail("cannot requantize to {}", dtype_name(target));
  }
}

}  // namespace

DType requantize_type_for(DType target, int64_t row_length, size_t num_dims) {
  if (num_dims < 2) return DType::F32;
  const quant::WeightFormat& format = quant::require_format(target);
  if (row_length % format.block_size != 0) return DType::F16;
  return target;
}

void requantize_gguf(const std::string& input_path, const std::string& output_path, DType target,
                     const std::function<void(const RequantizeNote&)>& on_tensor) {
  const uint32_t file_type = file_type_of(target);
  const auto input = gguf::GgufFile::open(input_path);
  gguf::GgufWriter writer(input->alignment());
  for (const gguf::KeyValue& kv : input->metadata()) {
    if (kv.key != "general.alignment") writer.set(kv.key, kv.value);
  }
  writer.set_u32("general.file_type", file_type);

  ProgressBar progress("quantizing", int64_t(input->tensors().size()));
  int64_t done = 0;
  std::vector<float> row;
  for (const gguf::TensorInfo& t : input->tensors()) {
    const DType to = requantize_type_for(target, t.dims[0], t.dims.size());
    const quant::WeightFormat* from_format = quant::find_format(t.type);
    if (from_format == nullptr) {
      fail("{}: tensor '{}' has type {}, which cannot be re-encoded", input_path, t.name,
           dtype_name(t.type));
    }
    if (to == t.type) {
      writer.add_tensor_view(t.name, t.type, t.dims, std::span<const uint8_t>(t.data, t.num_bytes));
    } else {
      const quant::WeightFormat& to_format = quant::require_format(to);
      const int64_t n = t.dims[0];
      const int64_t rows = t.num_elements / n;
      const int64_t in_row = quant::row_bytes(*from_format, n);
      const int64_t out_row = quant::row_bytes(to_format, n);
      std::vector<uint8_t> bytes(size_t(rows * out_row));
      row.resize(size_t(n));
      for (int64_t r = 0; r < rows; ++r) {
        from_format->dequantize_row(t.data + r * in_row, row.data(), n);
        to_format.quantize_row(row.data(), bytes.data() + r * out_row, n);
      }
      writer.add_tensor(t.name, to, t.dims, std::move(bytes));
    }
    on_tensor({t.name, t.type, to, t.dims.size() >= 2 && to != target});
    progress.update(++done);
  }
  progress.finish();
  writer.write(output_path);
}

}  // namespace kestrel
