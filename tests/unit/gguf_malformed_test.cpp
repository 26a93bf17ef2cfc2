// GgufFile on malformed input: every case must give a kestrel::Error naming the file and the
// problem, never a crash or a read out of bounds (the suite runs under AddressSanitizer, and each
// parse gets an exact-size heap copy so that a read one byte too far is caught). Small bad files
// are written byte by byte; bigger ones are truncations and byte flips of stories260K.gguf.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "loader/gguf_reader.h"
#include "test_paths.h"

namespace kestrel::gguf {
namespace {

static_assert(std::endian::native == std::endian::little, "the byte builder writes host order");

constexpr uint32_t kString = 8;
constexpr uint32_t kArray = 9;
constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ8_0 = 8;

// Builds a GGUF file byte by byte.
class Bytes {
 public:
  Bytes& raw(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    data.insert(data.end(), b, b + n);
    return *this;
  }
  Bytes& u8(uint8_t v) { return raw(&v, 1); }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& str(std::string_view s) { return u64(s.size()).raw(s.data(), s.size()); }
  Bytes& zeros(size_t n) {
    data.resize(data.size() + n, 0);
    return *this;
  }
  Bytes& pad_to(size_t alignment) { return zeros((alignment - data.size() % alignment) % alignment); }
  Bytes& header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    return raw("GGUF", 4).u32(version).u64(tensors).u64(kvs);
  }
  Bytes& kv_u32(std::string_view key, uint32_t v) { return str(key).u32(4).u32(v); }
  Bytes& kv_string(std::string_view key, std::string_view v) { return str(key).u32(kString).str(v); }
  Bytes& tensor(std::string_view name, const std::vector<uint64_t>& dims, uint32_t type,
                uint64_t offset) {
    str(name).u32(uint32_t(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }

  std::vector<uint8_t> data;
};

// An exact-size heap copy: AddressSanitizer reports any read past its end.
std::unique_ptr<uint8_t[]> exact_copy(const uint8_t* bytes, size_t size) {
  auto copy = std::make_unique<uint8_t[]>(size);
  if (size > 0) std::memcpy(copy.get(), bytes, size);
  return copy;
}

// Parses `bytes` as "bad.gguf"; succeeds when that throws a kestrel::Error whose message names
// the file and contains `problem`.
testing::AssertionResult rejected(const std::vector<uint8_t>& bytes, std::string_view problem) {
  const auto copy = exact_copy(bytes.data(), bytes.size());
  try {
    GgufFile::parse({copy.get(), bytes.size()}, "bad.gguf");
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.find("bad.gguf") == std::string::npos) {
      return testing::AssertionFailure() << "message does not name the file: " << message;
    }
    if (message.find(problem) == std::string::npos) {
      return testing::AssertionFailure() << "message lacks \"" << problem << "\": " << message;
    }
    return testing::AssertionSuccess();
  }
  return testing::AssertionFailure() << "parsed without error; expected \"" << problem << "\"";
}

testing::AssertionResult rejected(const Bytes& bytes, std::string_view problem) {
  return rejected(bytes.data, problem);
}

std::unique_ptr<GgufFile> parse_ok(const Bytes& bytes) {
  return GgufFile::parse(bytes.data, "good.gguf");
}

std::string error_of_open(const std::string& path) {
  try {
    GgufFile::open(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

const std::string kLongName = "a.tensor.name.long.enough.to.pass.the.count.check";

// The baseline the malformed cases deviate from: it must parse.
TEST(GgufMalformedTest, BuilderMakesValidFiles) {
  Bytes b;
  b.header(1, 2).kv_u32("a", 7).kv_string("s", "text").tensor("w", {4, 2}, kF32, 0).pad_to(32);
  b.zeros(32);
  const auto file = parse_ok(b);
  EXPECT_EQ(file->get_uint("a"), 7u);
  EXPECT_EQ(file->get_string("s"), "text");
  ASSERT_NE(file->find_tensor("w"), nullptr);
  EXPECT_EQ(file->find_tensor("w")->num_bytes, 32u);

  Bytes v2;  // version 2 has the same layout
  v2.header(0, 1, 2).kv_u32("a", 1);
  EXPECT_EQ(parse_ok(v2)->version(), 2u);
}

TEST(GgufMalformedTest, TooShortForMagic) {
  EXPECT_TRUE(rejected(std::vector<uint8_t>{}, "not a GGUF file: only 0 bytes long"));
  EXPECT_TRUE(rejected(std::vector<uint8_t>{'G', 'G', 'U'}, "not a GGUF file: only 3 bytes long"));
}

TEST(GgufMalformedTest, WrongMagic) {
  Bytes ggml;
  ggml.raw("GGML", 4).u32(3).u64(0).u64(0);
  EXPECT_TRUE(rejected(ggml, "wrong magic 47 47 4d 4c"));
  Bytes swapped;
  swapped.raw("FUGG", 4).u32(3).u64(0).u64(0);
  EXPECT_TRUE(rejected(swapped, "not a GGUF file: wrong magic"));
}

TEST(GgufMalformedTest, UnsupportedVersions) {
  EXPECT_TRUE(rejected(Bytes().header(0, 0, 1), "GGUF version 1 is obsolete"));
  EXPECT_TRUE(rejected(Bytes().header(0, 0, 4), "unsupported GGUF version 4"));
  EXPECT_TRUE(rejected(Bytes().header(0, 0, 0), "unsupported GGUF version 0"));
  EXPECT_TRUE(rejected(Bytes().header(0, 0, 0x03000000), "big-endian GGUF files are not supported"));
  EXPECT_TRUE(rejected(Bytes().header(0, 0, 0x02000000), "big-endian"));
}

TEST(GgufMalformedTest, TruncatedHeader) {
  EXPECT_TRUE(rejected(Bytes().raw("GGUF", 4), "truncated file: version needs 4 bytes at offset 4"));
  EXPECT_TRUE(rejected(Bytes().raw("GGUF", 4).u32(3).u32(0), "truncated file: tensor count"));
  EXPECT_TRUE(rejected(Bytes().raw("GGUF", 4).u32(3).u64(0).u8(0), "truncated file: metadata count"));
}

TEST(GgufMalformedTest, TruncatedInKey) {
  Bytes b;
  b.header(0, 1).u64(20).raw("0123456789abcde", 15);
  EXPECT_TRUE(rejected(b, "truncated file: metadata key of 20 bytes at offset 32 runs past the end"));
}

TEST(GgufMalformedTest, TruncatedBeforeValueType) {
  Bytes b;
  b.header(0, 1).str("general.name").u8(8);
  EXPECT_TRUE(rejected(b, "truncated file: metadata value type"));
}

TEST(GgufMalformedTest, TruncatedInStringValue) {
  Bytes b;
  b.header(0, 1).str("k").u32(kString).u64(100).raw("short", 5);
  EXPECT_TRUE(rejected(b, "truncated file: string value of 100 bytes"));
}

TEST(GgufMalformedTest, TruncatedInArray) {
  Bytes header_cut;
  header_cut.header(0, 1).str("arr").u32(kArray).u32(kString).u8(0);
  EXPECT_TRUE(rejected(header_cut, "truncated file: array length"));

  Bytes elements_cut;  // 10 uint32 announced, 5 present
  elements_cut.header(0, 1).str("arr").u32(kArray).u32(4).u64(10);
  for (uint32_t i = 0; i < 5; ++i) elements_cut.u32(i);
  EXPECT_TRUE(rejected(elements_cut, "key 'arr': array of 10 uint32 elements cannot fit in the 20 bytes"));

  Bytes string_cut;  // the third string runs past the end
  string_cut.header(0, 1).str("arr").u32(kArray).u32(kString).u64(3).str("a").str("b").u64(50).raw("xyz", 3);
  EXPECT_TRUE(rejected(string_cut, "truncated file: string value of 50 bytes"));

  Bytes nested_cut;
  nested_cut.header(0, 1).str("arr").u32(kArray).u32(kArray).u64(1).u32(6).u64(2).u32(0).u8(0);
  EXPECT_TRUE(rejected(nested_cut, "array of 2 float32 elements cannot fit"));
}

TEST(GgufMalformedTest, TruncatedInTensorInfos) {
  Bytes in_dims;
  in_dims.header(1, 0).str(kLongName).u32(2).u64(64).u32(0);
  EXPECT_TRUE(rejected(in_dims, "truncated file: tensor dimension needs 8 bytes"));
  Bytes before_type;
  before_type.header(1, 0).str(kLongName).u32(1).u64(64);
  EXPECT_TRUE(rejected(before_type, "truncated file: tensor type"));
  Bytes in_offset;
  in_offset.header(1, 0).str(kLongName).u32(1).u64(64).u32(kF32).u32(0);
  EXPECT_TRUE(rejected(in_offset, "truncated file: tensor offset"));
  Bytes in_name;
  in_name.header(1, 0).u64(200).raw(kLongName.data(), kLongName.size());
  EXPECT_TRUE(rejected(in_name, "truncated file: tensor name of 200 bytes"));
  Bytes second_missing;  // two tensors announced, one present, no data yet
  second_missing.header(2, 0).tensor(kLongName, {8}, kF32, 0).zeros(40);
  EXPECT_TRUE(rejected(second_missing, "bad.gguf"));
}

TEST(GgufMalformedTest, AbsurdStringLengths) {
  Bytes key;
  key.header(0, 1).u64(uint64_t(1) << 62).zeros(16);
  EXPECT_TRUE(rejected(key, "absurd string length 4611686018427387904 for metadata key at offset 24"));
  Bytes value;
  value.header(0, 1).str("k").u32(kString).u64(~uint64_t(0)).zeros(16);
  EXPECT_TRUE(rejected(value, "absurd string length 18446744073709551615 for string value"));
  Bytes name;
  name.header(1, 0).u64(uint64_t(1) << 40).zeros(40);
  EXPECT_TRUE(rejected(name, "absurd string length 1099511627776 for tensor name"));
}

TEST(GgufMalformedTest, AbsurdArrayCounts) {
  Bytes bytes;
  bytes.header(0, 1).str("a").u32(kArray).u32(0).u64(uint64_t(1) << 62).zeros(64);
  EXPECT_TRUE(rejected(bytes, "array of 4611686018427387904 uint8 elements cannot fit in the 64 bytes"));
  Bytes arrays;
  arrays.header(0, 1).str("a").u32(kArray).u32(kArray).u64(~uint64_t(0)).zeros(64);
  EXPECT_TRUE(rejected(arrays, "array of 18446744073709551615 array elements cannot fit"));
}

TEST(GgufMalformedTest, AbsurdCountsInTheHeader) {
  EXPECT_TRUE(rejected(Bytes().header(uint64_t(1) << 62, 0).zeros(64),
                       "the header claims 4611686018427387904 tensors, which cannot fit in the 64 bytes"));
  EXPECT_TRUE(rejected(Bytes().header(0, ~uint64_t(0)).zeros(64),
                       "the header claims 18446744073709551615 metadata entries"));
  // 3 tensor infos cannot fit in 64 bytes (each takes at least 32).
  EXPECT_TRUE(rejected(Bytes().header(3, 0).zeros(64), "the header claims 3 tensors"));
}

// A corrupt count inside a big file passes the "fits in what is left" check. The parser must
// reach the bytes that show the file is corrupt, not reserve memory for the count up front (a
// billion bools would be 40 GB of Values). The 4 GiB of input is an untouched zero mapping.
TEST(GgufMalformedTest, CorruptCountInAHugeFileGivesAnErrorNotAnAllocationFailure) {
  const size_t size = size_t(4) << 30;
  void* mapping = mmap(nullptr, size, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(mapping, MAP_FAILED);
  auto* bytes = static_cast<uint8_t*>(mapping);
  Bytes head;
  head.header(0, 1).str("flags").u32(kArray).u32(7).u64(size - 1024).u8(1).u8(0).u8(2);
  std::memcpy(bytes, head.data.data(), head.data.size());
  const std::span<const uint8_t> input(bytes, size);
  try {
    GgufFile::parse(input, "huge.gguf");
    ADD_FAILURE() << "parsed without error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("huge.gguf: key 'flags': bool value 2"), std::string::npos)
        << e.what();
  }

  // Likewise a kv count of 330 million: the zeros read as empty keys, and the second one is a
  // duplicate.
  Bytes many_keys;
  many_keys.header(0, size / 13 - 2);
  std::memcpy(bytes, many_keys.data.data(), many_keys.data.size());
  std::memset(bytes + many_keys.data.size(), 0, head.data.size());
  try {
    GgufFile::parse(input, "huge.gguf");
    ADD_FAILURE() << "parsed without error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("duplicate metadata key ''"), std::string::npos) << e.what();
  }
  munmap(mapping, size);
}

TEST(GgufMalformedTest, UnknownValueTypes) {
  EXPECT_TRUE(rejected(Bytes().header(0, 1).str("k").u32(13).u64(0),
                       "key 'k': unknown metadata value type 13"));
  EXPECT_TRUE(rejected(Bytes().header(0, 1).str("k").u32(0xFFFFFFFF).u64(0),
                       "unknown metadata value type 4294967295"));
  EXPECT_TRUE(rejected(Bytes().header(0, 1).str("k").u32(kArray).u32(13).u64(1).u64(0),
                       "key 'k': unknown array element type 13"));
}

TEST(GgufMalformedTest, ArraysNestedTooDeeply) {
  Bytes deepest_allowed;
  deepest_allowed.header(0, 1).str("n").u32(kArray);
  for (int i = 1; i < kMaxArrayNesting; ++i) deepest_allowed.u32(kArray).u64(1);
  deepest_allowed.u32(0).u64(0);
  EXPECT_NO_THROW(parse_ok(deepest_allowed));

  Bytes too_deep;
  too_deep.header(0, 1).str("n").u32(kArray);
  for (int i = 0; i < kMaxArrayNesting; ++i) too_deep.u32(kArray).u64(1);
  too_deep.u32(0).u64(0);
  EXPECT_TRUE(rejected(too_deep, "key 'n': arrays nested too deeply"));
}

TEST(GgufMalformedTest, BoolNotZeroOrOne) {
  EXPECT_TRUE(rejected(Bytes().header(0, 1).str("b").u32(7).u8(2).zeros(8),
                       "key 'b': bool value 2 is neither 0 nor 1"));
  EXPECT_TRUE(rejected(Bytes().header(0, 1).str("b").u32(kArray).u32(7).u64(3).u8(1).u8(0).u8(255),
                       "bool value 255 is neither 0 nor 1"));
}

TEST(GgufMalformedTest, DuplicateKey) {
  EXPECT_TRUE(rejected(Bytes().header(0, 2).kv_u32("a", 1).kv_string("a", "x"),
                       "duplicate metadata key 'a'"));
}

TEST(GgufMalformedTest, BadAlignment) {
  EXPECT_TRUE(rejected(Bytes().header(0, 1).kv_u32("general.alignment", 0),
                       "general.alignment is 0 but must be a power of two between 1 and 65536"));
  EXPECT_TRUE(rejected(Bytes().header(0, 1).kv_u32("general.alignment", 3), "general.alignment is 3"));
  EXPECT_TRUE(rejected(Bytes().header(0, 1).kv_u32("general.alignment", 1 << 17),
                       "general.alignment is 131072"));
  EXPECT_TRUE(rejected(Bytes().header(0, 1).kv_string("general.alignment", "32"),
                       "general.alignment is \"32\""));
  EXPECT_TRUE(rejected(Bytes().header(0, 1).str("general.alignment").u32(5).u32(uint32_t(-32)),
                       "general.alignment is -32"));
}

TEST(GgufMalformedTest, UnknownTensorTypes) {
  for (const uint32_t type : {4u, 5u, 31u, 200u, 0xFFFFFFFFu}) {
    Bytes b;
    b.header(1, 0).tensor("w", {32}, type, 0).pad_to(32).zeros(256);
    EXPECT_TRUE(rejected(b, "tensor 'w' has unknown tensor type " + std::to_string(type)));
  }
}

TEST(GgufMalformedTest, BadDimensionCounts) {
  Bytes none;
  none.header(1, 0).str(kLongName).u32(0).u32(kF32).u64(0).zeros(64);
  EXPECT_TRUE(rejected(none, "has 0 dimensions (must be 1 to 4)"));
  Bytes five;
  five.header(1, 0).tensor("w", {1, 1, 1, 1, 1}, kF32, 0).pad_to(32).zeros(32);
  EXPECT_TRUE(rejected(five, "tensor 'w' has 5 dimensions (must be 1 to 4)"));
  Bytes huge;
  huge.header(1, 0).str(kLongName).u32(0xFFFFFFFF).zeros(64);
  EXPECT_TRUE(rejected(huge, "has 4294967295 dimensions"));
}

TEST(GgufMalformedTest, ZeroOrAbsurdDimensions) {
  EXPECT_TRUE(rejected(Bytes().header(1, 0).tensor("w", {4, 0}, kF32, 0).pad_to(32).zeros(32),
                       "tensor 'w' has absurd dimension 1 = 0"));
  EXPECT_TRUE(rejected(Bytes().header(1, 0).tensor("w", {uint64_t(1) << 41}, kF32, 0).pad_to(32).zeros(32),
                       "tensor 'w' has absurd dimension 0 = 2199023255552"));
  EXPECT_TRUE(rejected(Bytes().header(1, 0).tensor("w", {~uint64_t(0)}, kF32, 0).pad_to(32).zeros(32),
                       "has absurd dimension 0 = 18446744073709551615"));
}

TEST(GgufMalformedTest, ElementCountOverflow) {
  const uint64_t big = uint64_t(1) << 40;
  // 2^80 overflows int64; 2^41 fits but exceeds the limit.
  EXPECT_TRUE(rejected(Bytes().header(1, 0).tensor("w", {big, big}, kF32, 0).pad_to(32).zeros(32),
                       "tensor 'w' has an absurd element count"));
  EXPECT_TRUE(rejected(Bytes().header(1, 0).tensor("w", {1 << 21, 1 << 20}, kF32, 0).pad_to(32).zeros(32),
                       "tensor 'w' has an absurd element count"));
  EXPECT_TRUE(rejected(Bytes().header(1, 0).tensor("w", {1 << 16, 1 << 16, 1 << 16, 1 << 16}, kF32, 0).pad_to(32).zeros(32),
                       "absurd element count"));
}

TEST(GgufMalformedTest, RowLengthNotAMultipleOfTheBlockSize) {
  EXPECT_TRUE(rejected(Bytes().header(1, 0).tensor("q", {33}, kQ8_0, 0).pad_to(32).zeros(64),
                       "tensor 'q' row length 33 is not a multiple of the Q8_0 block size 32"));
  EXPECT_TRUE(rejected(Bytes().header(1, 0).tensor("k", {32, 8}, 12, 0).pad_to(32).zeros(256),
                       "row length 32 is not a multiple of the Q4_K block size 256"));
}

TEST(GgufMalformedTest, MisalignedTensorOffset) {
  EXPECT_TRUE(rejected(Bytes().header(1, 0).tensor("w", {4}, kF32, 4).pad_to(32).zeros(64),
                       "tensor 'w' offset 4 is not aligned to 32"));
  Bytes aligned64;
  aligned64.header(1, 1).kv_u32("general.alignment", 64).tensor("w", {4}, kF32, 32).pad_to(64).zeros(128);
  EXPECT_TRUE(rejected(aligned64, "offset 32 is not aligned to 64"));
}

TEST(GgufMalformedTest, TensorPastTheEnd) {
  EXPECT_TRUE(rejected(Bytes().header(1, 0).tensor("w", {64}, kF32, 0).pad_to(32).zeros(128),
                       "tensor 'w' (256 bytes at data offset 0) runs past the end of the file "
                       "(data section holds 128 bytes)"));
  EXPECT_TRUE(rejected(Bytes().header(1, 0).tensor("w", {4}, kF32, 32).pad_to(32).zeros(40),
                       "tensor 'w' (16 bytes at data offset 32) runs past the end"));
  // offset + size would wrap around 2^64.
  EXPECT_TRUE(rejected(Bytes().header(1, 0).tensor("w", {64}, kF32, ~uint64_t(31)).pad_to(32).zeros(64),
                       "runs past the end"));
  // No data section at all (the header is not even padded).
  EXPECT_TRUE(rejected(Bytes().header(1, 0).tensor("w", {4}, kF32, 0),
                       "truncated file: tensor data should start at offset 64"));
}

TEST(GgufMalformedTest, DuplicateTensorName) {
  EXPECT_TRUE(rejected(
      Bytes().header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad_to(32).zeros(64),
      "duplicate tensor name 'w'"));
}

TEST(GgufMalformedTest, PathsThatAreNotGgufFiles) {
  const std::string dir = test::scratch_dir("gguf_malformed_paths");
  const std::string missing = dir + "/does-not-exist.gguf";
  std::string message = error_of_open(missing);
  EXPECT_NE(message.find(missing + ": cannot open"), std::string::npos) << message;

  message = error_of_open(dir);
  EXPECT_NE(message.find(dir + ": not a regular file"), std::string::npos) << message;

  const std::string empty = dir + "/empty.gguf";
  std::ofstream(empty).close();
  message = error_of_open(empty);
  EXPECT_NE(message.find(empty + ": not a GGUF file: only 0 bytes long"), std::string::npos) << message;
}

class RealFileDamageTest : public testing::Test {
 protected:
  void SetUp() override {
    const std::string s = test::read_file(path_);
    bytes_.assign(s.begin(), s.end());
    data_offset_ = GgufFile::parse(bytes_, path_)->data_offset();
  }

  // Parses the first `size` bytes from an exact-size copy and returns the error message.
  std::string error_of_prefix(size_t size) {
    const auto copy = exact_copy(bytes_.data(), size);
    try {
      GgufFile::parse({copy.get(), size}, "cut.gguf");
    } catch (const Error& e) {
      return e.what();
    }
    return "(no error)";
  }

  const std::string path_ = test::shared_model_path("stories260K.gguf");
  std::vector<uint8_t> bytes_;
  uint64_t data_offset_ = 0;
};

// Every cut inside the header (kv pairs, tensor infos, padding) and a sample of cuts inside the
// tensor data.
TEST_F(RealFileDamageTest, EveryTruncationIsAnError) {
  std::vector<size_t> cuts;
  for (size_t n = 0; n <= data_offset_; ++n) cuts.push_back(n);
  for (size_t n = data_offset_ + 1; n < bytes_.size(); n += 4093) cuts.push_back(n);
  for (size_t back = 1; back <= 8; ++back) cuts.push_back(bytes_.size() - back);
  for (const size_t n : cuts) {
    const std::string message = error_of_prefix(n);
    ASSERT_EQ(message.rfind("cut.gguf: ", 0), 0u) << "cut at " << n << ": " << message;
  }
  EXPECT_NE(error_of_prefix(bytes_.size() - 1).find("'blk.4.ffn_norm.weight' (256 bytes at data "
                                                    "offset 1170944) runs past the end"),
            std::string::npos);
  EXPECT_NE(error_of_prefix(data_offset_ - 1).find("tensor data should start at offset 14176"),
            std::string::npos);
}

TEST_F(RealFileDamageTest, TruncatedCopiesOnDiskAreErrors) {
  const std::string dir = test::scratch_dir("gguf_truncated_copies");
  for (const size_t n : {size_t(3), size_t(24), size_t(1000), size_t(14152), size_t(14176),
                         size_t(600000), bytes_.size() - 1}) {
    const std::string path = dir + "/cut-" + std::to_string(n) + ".gguf";
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes_.data()), std::streamsize(n));
    const std::string message = error_of_open(path);
    EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
  }
}

// Each header byte replaced in turn by a few values: the result parses or is an Error, nothing
// else. The file is damaged in place in one exact-size buffer (no per-case copy of 1 MB).
TEST_F(RealFileDamageTest, ByteFlipsInTheHeaderNeverCrash) {
  const auto copy = exact_copy(bytes_.data(), bytes_.size());
  const std::span<const uint8_t> input(copy.get(), bytes_.size());
  size_t errors = 0;
  for (size_t i = 0; i < data_offset_; ++i) {
    const uint8_t original = copy[i];
    // Off by one in a low byte (lengths, counts, type ids) or huge in a high one.
    for (const uint8_t damaged : {uint8_t(original ^ 0x01), uint8_t(0xFF)}) {
      if (damaged == original) continue;
      copy[i] = damaged;
      try {
        GgufFile::parse(input, "flipped.gguf");
      } catch (const Error& e) {
        ++errors;
        ASSERT_EQ(std::string(e.what()).rfind("flipped.gguf: ", 0), 0u) << e.what();
      }
    }
    copy[i] = original;
  }
  // Most damage is detected (a flipped byte inside a token string, a float or a dimension that
  // keeps the sizes consistent is not).
  EXPECT_GT(errors, data_offset_ / 2);
}

}  // namespace
}  // namespace kestrel::gguf
