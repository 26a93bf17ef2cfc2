// Prints xgrammar's token mask at every step of seeded random walks through grammars, one line per
// step (name, walk, step, allowed count, hash of the allowed ids), for comparing two builds of
// xgrammar (scripts/check_xgrammar_patches.sh): with the same masks the walks are the same.
//   xgrammar_walk_masks VOCAB.hex SCHEMAS.json WALKS
// VOCAB.hex: one token per line, its bytes in hex (empty: a token without text). SCHEMAS.json: a
// list of {name, schema}; each schema is walked with whitespace runs bounded at 20 and unbounded,
// then a few counted-repetition regexes are walked.
#include <xgrammar/xgrammar.h>

#include <cstdint>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "picojson.h"

namespace {

std::vector<std::string> read_vocab(const char* path) {
  std::ifstream in(path);
  std::vector<std::string> pieces;
  for (std::string line; std::getline(in, line);) {
    std::string bytes;
    for (size_t i = 0; i + 1 < line.size(); i += 2) bytes.push_back(char(std::stoi(line.substr(i, 2), nullptr, 16)));
    pieces.push_back(bytes);
  }
  return pieces;
}

// Walks `grammar` `walks` times: each step picks an allowed token at random (half the time
// preferring tokens of at most two bytes, so walks reach the ends of strings and objects).
void walk(const std::string& name, const xgrammar::CompiledGrammar& grammar, const std::vector<std::string>& pieces,
          int walks, uint64_t seed) {
  std::vector<int32_t> bits((pieces.size() + 31) / 32);
  int64_t shape[1] = {int64_t(bits.size())};
  DLTensor tensor{};
  tensor.data = bits.data();
  tensor.device = {kDLCPU, 0};
  tensor.ndim = 1;
  tensor.dtype = xgrammar::GetBitmaskDLType();
  tensor.shape = shape;
  for (int w = 0; w < walks; ++w) {
    std::mt19937_64 rng(seed * 1000003 + uint64_t(w) * 7919);
    xgrammar::GrammarMatcher matcher(grammar);
    for (int step = 0; step < 200 && !matcher.IsTerminated(); ++step) {
      matcher.FillNextTokenBitmask(&tensor);
      uint64_t hash = 1469598103934665603ull;
      std::vector<int32_t> allowed;
      for (size_t id = 0; id < pieces.size(); ++id) {
        if ((bits[id / 32] >> (id % 32)) & 1) {
          allowed.push_back(int32_t(id));
          hash = (hash ^ id) * 1099511628211ull;
        }
      }
      std::cout << name << " walk " << w << " step " << step << " allowed " << allowed.size() << " hash " << std::hex
                << hash << std::dec << "\n";
      if (allowed.empty()) break;
      int32_t token = allowed[rng() % allowed.size()];
      if (rng() % 2) {
        for (int tries = 0; tries < 20 && pieces[size_t(token)].size() > 2; ++tries) token = allowed[rng() % allowed.size()];
      }
      if (!matcher.AcceptToken(token)) {
        std::cout << name << " walk " << w << ": an allowed token was not accepted\n";
        break;
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: xgrammar_walk_masks VOCAB.hex SCHEMAS.json WALKS\n";
    return 2;
  }
  const std::vector<std::string> pieces = read_vocab(argv[1]);
  const xgrammar::TokenizerInfo info(pieces, xgrammar::VocabType::RAW, int(pieces.size()), std::vector<int32_t>{}, false);
  xgrammar::GrammarCompiler compiler(info, 1, /*cache_enabled=*/true);
  std::ifstream schemas_file(argv[2]);
  std::stringstream text;
  text << schemas_file.rdbuf();
  picojson::value schemas;
  if (const std::string error = picojson::parse(schemas, text.str()); !error.empty()) {
    std::cerr << argv[2] << ": " << error << "\n";
    return 1;
  }
  const int walks = std::atoi(argv[3]);
  uint64_t seed = 0;
  for (const picojson::value& entry : schemas.get<picojson::array>()) {
    const std::string name = entry.get("name").to_str(), schema = entry.get("schema").serialize();
    for (const int whitespace : {20, 0}) {
      const auto bound = whitespace > 0 ? std::optional<int>(whitespace) : std::nullopt;
      walk(name + "/ws" + std::to_string(whitespace),
           compiler.CompileJSONSchema(schema, true, std::nullopt, std::nullopt, false, bound), pieces, walks, ++seed);
    }
  }
  for (const char* regex : {"[0-9]{3}-[a-z]+", "(Once upon a time, [a-z ]{1,40}\\. ){2,4}The end\\.", "[^\"\\\\]{0,6}\"",
                            "[a-zA-Z0-9_]{2,17}", "\\w{1,3}[0-9]"}) {
    walk(regex, compiler.CompileRegex(regex), pieces, walks, ++seed);
  }
  return 0;
}
