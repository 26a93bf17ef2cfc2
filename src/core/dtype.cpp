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

// Block sizes and bytes per block of every GGML type (k-quants use super-blocks of 256).
constexpr std::array<Entry, 32> kLayouts{{
    {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
    {3, {"Q4_1", 32, 20}},      {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
    {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 36}},      {10, {"Q2_K", 256, 84}},
    {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
    {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}},
    {17, {"IQ2_XS", 256, 74}},  {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
    {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},  {22, {"IQ2_S", 256, 82}},
    {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
    {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},
    {29, {"IQ1_M", 256, 56}},   {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
    {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},
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
