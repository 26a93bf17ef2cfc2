// Writes small hand-made GGUF files into the directory given as argument, as seeds for gguf_fuzz
// beside the real models: every value type, nested and empty arrays, several tensor types and
// alignments, a version-2 header. Small seeds let the fuzzer reach every branch of the parser
// quickly; the models give it realistic layouts.
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "loader/gguf_writer.h"

namespace {

using namespace kestrel;
using namespace kestrel::gguf;
using S = Value::Storage;

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = uint8_t(i * 37 + 11);
  return bytes;
}

Value array_of(ValueType type, std::vector<Value> items) { return Value::of_array(type, std::move(items)); }

void write_all_value_types(const std::string& path) {
  GgufWriter writer;
  writer.set("u8", Value{S(std::in_place_index<0>, uint8_t(200))});
  writer.set("i8", Value{S(std::in_place_index<1>, int8_t(-5))});
  writer.set("u16", Value{S(std::in_place_index<2>, uint16_t(60000))});
  writer.set("i16", Value{S(std::in_place_index<3>, int16_t(-300))});
  writer.set_u32("u32", 123456);
  writer.set("i32", Value::of_i32(-7));
  writer.set_f32("f32", 0.25f);
  writer.set_bool("bool", true);
  writer.set_string("general.architecture", "llama");
  writer.set_string("empty", "");
  writer.set("u64", Value::of_u64(uint64_t(1) << 40));
  writer.set("i64", Value{S(std::in_place_index<11>, int64_t(-1))});
  writer.set("f64", Value{S(std::in_place_index<12>, 2.5)});
  writer.set("tokenizer.ggml.tokens",
             array_of(ValueType::String, {Value::of_string("<unk>"), Value::of_string("<s>"),
                                          Value::of_string("\xC4\xA0the")}));
  writer.set("bools", array_of(ValueType::Bool, {Value::of_bool(false), Value::of_bool(true)}));
  writer.set("empty_array", array_of(ValueType::Float32, {}));
  writer.set("nested", array_of(ValueType::Array,
                                {array_of(ValueType::Int32, {Value::of_i32(1)}),
                                 array_of(ValueType::Array, {array_of(ValueType::String, {})})}));
  writer.write(path);
}

void write_tensors(const std::string& path, uint32_t alignment) {
  GgufWriter writer(alignment);
  writer.set_string("general.architecture", "llama");
  writer.set_u32("llama.block_count", 1);
  writer.add_tensor("token_embd.weight", DType::F32, {4, 3}, pattern(4 * 3 * 4));
  writer.add_tensor("blk.0.attn_q.weight", DType::F16, {8, 2}, pattern(8 * 2 * 2));
  writer.add_tensor("blk.0.ffn_down.weight", DType::Q8_0, {32, 2}, pattern(2 * 34));
  writer.add_tensor("blk.0.ffn_up.weight", DType::Q4_K, {256}, pattern(144));
  writer.add_tensor("output_norm.weight", DType::I8, {3, 1, 1, 1}, pattern(3));
  writer.write(path);
}

// GgufWriter writes version 3; version 2 has the same layout, so patching the field is enough.
void write_version2(const std::string& path) {
  write_tensors(path, 32);
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekp(4);
  const char version2[4] = {2, 0, 0, 0};
  file.write(version2, 4);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  try {
    write_all_value_types(dir + "/hand-values.gguf");
    write_tensors(dir + "/hand-tensors.gguf", 32);
    write_tensors(dir + "/hand-align1.gguf", 1);
    write_tensors(dir + "/hand-align64.gguf", 64);
    write_version2(dir + "/hand-v2.gguf");
    GgufWriter().write(dir + "/hand-empty.gguf");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}
