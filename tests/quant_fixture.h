// The llama.cpp-quantized block fixtures under tests/data/quant/, read for the quant tests:
//  "KQFX" (scripts/gen_quant_fixtures.py, gen_tq_mxfp4_fixtures.py): magic, version, ggml type,
//         blocks, block bytes; the raw blocks, gguf-py's dequantization, the F32 values
//         llama-quantize (or gguf-py's quantize) quantized (the caller gives the values per block);
//  "IQFX" (scripts/gen_iq_fixtures.py, gen_tq_mxfp4_fixtures.py): the same header plus values
//         per block; raw blocks and gguf-py's dequantization only.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "test_paths.h"

namespace kestrel::test {

struct QuantFixture {
  uint32_t ggml_type = 0, blocks = 0, block_bytes = 0, block_size = 0;
  std::vector<uint8_t> raw;
  std::vector<float> gguf_py;   // gguf-py's dequantization of raw
  std::vector<float> original;  // the F32 values llama-quantize quantized (KQFX only)
};

// `block_size`: values per block of a KQFX file (an IQFX file says it itself).
inline QuantFixture read_quant_fixture(const std::string& name, uint32_t block_size = 0) {
  std::ifstream in(test_data_path("quant/" + name), std::ios::binary);
  EXPECT_TRUE(in.good()) << name;
  char magic[4] = {};
  uint32_t version = 0;
  QuantFixture f;
  in.read(magic, 4);
  in.read(reinterpret_cast<char*>(&version), 4);
  in.read(reinterpret_cast<char*>(&f.ggml_type), 4);
  in.read(reinterpret_cast<char*>(&f.blocks), 4);
  in.read(reinterpret_cast<char*>(&f.block_bytes), 4);
  const bool iq = std::string(magic, 4) == "IQFX";
  EXPECT_TRUE(iq || std::string(magic, 4) == "KQFX") << name << ": not a quant fixture";
  EXPECT_EQ(version, 1u) << name;
  f.block_size = block_size;
  if (iq) in.read(reinterpret_cast<char*>(&f.block_size), 4);
  f.raw.resize(size_t(f.blocks) * f.block_bytes);
  f.gguf_py.resize(size_t(f.blocks) * f.block_size);
  if (!iq) f.original.resize(size_t(f.blocks) * f.block_size);
  in.read(reinterpret_cast<char*>(f.raw.data()), std::streamsize(f.raw.size()));
  in.read(reinterpret_cast<char*>(f.gguf_py.data()), std::streamsize(f.gguf_py.size() * 4));
  in.read(reinterpret_cast<char*>(f.original.data()), std::streamsize(f.original.size() * 4));
  EXPECT_TRUE(in.good()) << name << ": truncated";
  return f;
}

}  // namespace kestrel::test
