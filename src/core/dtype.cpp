#include "core/dtype.h"

#include <array>
#include <cctype>
#include <string>

#include "core/error.h"

namespace kestrel {
namespace {

struct Entry {
  uint32_t id;
  DTypeLayout layout;
};

// Block sizes and bytes per block of every GGML type (k-quants use super-blocks of 256), then
// Kestrel's formats (documented in dtype.h). INT8_PC's block of 32 is only a length rule: its
// activations are Q8_0, so rows must be whole Q8_0 blocks.
constexpr std::array<Entry, 50> kLayouts{{
    {0, {"F32", 1, 4, 0}},         {1, {"F16", 1, 2, 0}},         {2, {"Q4_0", 32, 18, 0}},
    {3, {"Q4_1", 32, 20, 0}},      {6, {"Q5_0", 32, 22, 0}},      {7, {"Q5_1", 32, 24, 0}},
    {8, {"Q8_0", 32, 34, 0}},      {9, {"Q8_1", 32, 36, 0}},      {10, {"Q2_K", 256, 84, 0}},
    {11, {"Q3_K", 256, 110, 0}},   {12, {"Q4_K", 256, 144, 0}},   {13, {"Q5_K", 256, 176, 0}},
    {14, {"Q6_K", 256, 210, 0}},   {15, {"Q8_K", 256, 292, 0}},   {16, {"IQ2_XXS", 256, 66, 0}},
    {17, {"IQ2_XS", 256, 74, 0}},  {18, {"IQ3_XXS", 256, 98, 0}}, {19, {"IQ1_S", 256, 50, 0}},
    {20, {"IQ4_NL", 32, 18, 0}},   {21, {"IQ3_S", 256, 110, 0}},  {22, {"IQ2_S", 256, 82, 0}},
    {23, {"IQ4_XS", 256, 136, 0}}, {24, {"I8", 1, 1, 0}},         {25, {"I16", 1, 2, 0}},
    {26, {"I32", 1, 4, 0}},        {27, {"I64", 1, 8, 0}},        {28, {"F64", 1, 8, 0}},
    {29, {"IQ1_M", 256, 56, 0}},   {30, {"BF16", 1, 2, 0}},       {34, {"TQ1_0", 256, 54, 0}},
    {35, {"TQ2_0", 256, 66, 0}},   {39, {"MXFP4", 32, 17, 0}},
    {1000, {"INT8_PC", 32, 32, 4}},
    {1001, {"INT4_SYM_G32", 32, 18, 0}},
    {1002, {"INT4_SYM_G64", 64, 34, 0}},
    {1003, {"INT4_SYM_G128", 128, 66, 0}},
    {1004, {"INT4_ASYM_G32", 32, 20, 0}},
    {1005, {"INT4_ASYM_G64", 64, 36, 0}},
    {1006, {"INT4_ASYM_G128", 128, 68, 0}},
    {1007, {"FP8_E4M3_PC", 1, 1, 4}},
    {1008, {"W8A8", 32, 32, 4}},
    {1009, {"INT3_ASYM_G64", 64, 28, 0}},
    {1010, {"INT3_ASYM_G128", 128, 52, 0}},
    {1011, {"INT2_ASYM_G64", 64, 20, 0}},
    {1012, {"INT2_ASYM_G128", 128, 36, 0}},
    {1013, {"NF4", 64, 34, 0}},
    {1014, {"INT4_ZP_G32", 32, 20, 0}},
    {1015, {"INT4_ZP_G64", 64, 36, 0}},
    {1016, {"INT4_ZP_G128", 128, 68, 0}},
    {1017, {"IQ3_S_L4", 256, 134, 0}},
}};

}  // namespace

std::optional<DTypeLayout> dtype_layout(uint32_t type_id) {
  for (const Entry& entry : kLayouts) {
    if (entry.id == type_id) return entry.layout;
  }
  return std::nullopt;
}

DTypeLayout dtype_layout(DType type) {
  const auto layout = dtype_layout(uint32_t(type));
  if (!layout) fail("internal: no layout for type id {}", uint32_t(type));
  return *layout;
}

std::string_view dtype_name(DType type) { return dtype_layout(type).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string upper(name);
  for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
  for (const Entry& entry : kLayouts) {
    if (entry.layout.name == upper) return DType(entry.id);
  }
  return std::nullopt;
}

}  // namespace kestrel
