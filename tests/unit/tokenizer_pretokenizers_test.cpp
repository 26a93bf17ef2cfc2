// Every tokenizer.ggml.pre value llama.cpp knows, against splits computed without Kestrel:
// tests/data/pretokenizer/llama_cpp_splits.json holds, for llama.cpp's own test strings and some
// harder ones, how llama.cpp's regex lists (read from its source by
// scripts/gen_pretokenizer_splits.py, run with Python's `regex` module) cut each string, and the
// flags llama.cpp sets for each name. Kestrel's table is checked name by name against it.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "test_paths.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/pretokenizer_kinds.h"

namespace kestrel {
namespace {

using tokenizer::PreTokenizer;

// Names llama.cpp knows that Kestrel refuses, with the reason.
const std::map<std::string, std::string> kNotSupported = {
    {"whitespace",
     "belongs to the 'whitespace' tokenizer model (drops whitespace, lower-cases), which Kestrel "
     "does not have"},
};

const nlohmann::json& reference() {
  static const nlohmann::json data = nlohmann::json::parse(
      test::read_file(test::test_data_path("pretokenizer/llama_cpp_splits.json")));
  return data;
}

std::string show(const std::vector<std::string_view>& words) {
  std::string s;
  for (const std::string_view w : words) s += "[" + std::string(w) + "]";
  return s;
}

std::vector<std::string_view> cut(std::string_view text, const nlohmann::json& lengths) {
  std::vector<std::string_view> words;
  size_t pos = 0;
  for (const auto& length : lengths) {
    words.push_back(text.substr(pos, length.get<size_t>()));
    pos += length.get<size_t>();
  }
  return words;
}

TEST(PreTokenizerTable, EveryLlamaCppNameSplitsAsLlamaCpp) {
  const nlohmann::json& data = reference();
  const auto& strings = data.at("strings");
  ASSERT_GE(strings.size(), 50u);
  size_t names_checked = 0;
  for (const auto& [name, info] : data.at("names").items()) {
    SCOPED_TRACE("pre '" + name + "'");
    if (kNotSupported.contains(name)) {
      EXPECT_THROW(PreTokenizer::for_pre(name), Error);
      continue;
    }
    const std::string type = info.at("type").get<std::string>();
    const auto& expected = data.at("types").at(type);
    std::unique_ptr<PreTokenizer> pre;
    ASSERT_NO_THROW(pre = PreTokenizer::for_pre(name));
    EXPECT_EQ(pre->word_as_whole_token(), info.at("ignore_merges").get<bool>());
    EXPECT_EQ(pre->raw_utf8(), info.at("escape_whitespaces").get<bool>());
    EXPECT_EQ(pre->raw_utf8(), expected.at("raw_utf8").get<bool>());
    EXPECT_EQ(tokenizer::find_pre_tokenizer_kind(name)->add_bos, info.at("add_bos").get<bool>());
    size_t passes = 0;
    for (size_t i = 0; i < strings.size(); ++i) {
      const std::string text = strings[i].get<std::string>();
      std::vector<std::string_view> words;
      pre->split(text, words);
      const std::vector<std::string_view> want = cut(text, expected.at("splits")[i]);
      if (words == want) {
        ++passes;
      } else {
        ADD_FAILURE() << name << " (" << type << ") string " << i << "\n  got:      " << show(words)
                      << "\n  expected: " << show(want);
      }
    }
    if (passes != strings.size()) {
      std::printf("%-26s %-18s %zu/%zu\n", name.c_str(), type.c_str(), passes, strings.size());
    }
    ++names_checked;
  }
  std::printf("%zu pre-tokenizer names checked on %zu strings\n", names_checked, strings.size());
}

// Kestrel invents no names: everything it accepts is a name llama.cpp knows.
TEST(PreTokenizerTable, NoNamesBeyondLlamaCpp) {
  const auto& names = reference().at("names");
  const std::string list = PreTokenizer::supported_names();
  size_t pos = 0;
  while (pos < list.size()) {
    size_t end = list.find(", ", pos);
    if (end == std::string::npos) end = list.size();
    const std::string name = list.substr(pos, end - pos);
    EXPECT_TRUE(names.contains(name)) << name;
    pos = end + 2;
  }
}

TEST(PreTokenizerTable, UnknownNameIsNamedWithTheSupportedOnes) {
  try {
    PreTokenizer::for_pre("whitespace");
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'whitespace'"), std::string::npos) << message;
    EXPECT_NE(message.find("deepseek-coder"), std::string::npos) << message;
    EXPECT_NE(message.find("gpt-4o"), std::string::npos) << message;
  }
  EXPECT_NE(tokenizer::find_pre_tokenizer_kind(""), nullptr) << "an empty name is 'default'";
}

// A few splits spelled out, so that a reader sees what the table does (the data above is the check).
TEST(PreTokenizerTable, Examples) {
  auto split = [](const std::string& pre, std::string_view text) {
    std::vector<std::string_view> words;
    PreTokenizer::for_pre(pre)->split(text, words);
    return std::vector<std::string>(words.begin(), words.end());
  };
  using Words = std::vector<std::string>;
  EXPECT_EQ(split("superbpe", "x 1234567"), (Words{"x ", "1", "234", "567"}))
      << "empty lookahead matches split";
  EXPECT_EQ(split("afmoe", "12345"), (Words{"12", "345"}));
  EXPECT_EQ(split("starcoder", "x 42"), (Words{"x", " ", "4", "2"}));
  EXPECT_EQ(split("gpt-4o", "HelloWorld's"), (Words{"Hello", "World's"}));
  EXPECT_EQ(split("kimi-k2", "abc中文def"), (Words{"abc", "中文", "def"}));
  EXPECT_EQ(split("gemma4", "a b\n\nc"), (Words{"a b", "\n\n", "c"}));
}

}  // namespace
}  // namespace kestrel
