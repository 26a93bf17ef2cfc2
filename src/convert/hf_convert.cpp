#include "convert/hf_convert.h"

#include "loader/gguf_writer.h"
#include "loader/hf_folder.h"

namespace kestrel {

void convert_hf_to_gguf(const std::string& folder, const std::string& output_path) {
  const auto file = load_hf_folder(folder);
  gguf::GgufWriter writer;
  for (const gguf::KeyValue& kv : file->metadata()) writer.set(kv.key, kv.value);
  writer.set_u32("general.file_type", 0);  // tensors keep their dtypes (F32/F16/BF16)
  for (const gguf::TensorInfo& t : file->tensors()) {
    writer.add_tensor_view(t.name, t.type, t.dims, std::span<const uint8_t>(t.data, t.num_bytes));
  }
  writer.write(output_path);
}

}  // namespace kestrel
