// kestrel convert: llama2.c checkpoint + tokenizer -> GGUF; kestrel quantize: re-encode weights.
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "convert/llama2c.h"
#include "convert/requantize.h"
#include "core/error.h"

namespace kestrel::cli {
namespace {

struct ConvertOptions {
  std::string input;
  std::string tokenizer;
  std::string output;
};

struct QuantizeOptions {
  std::string input;
  std::string output;
  std::string type;
};

void convert(const ConvertOptions& o) {
  if (o.tokenizer.empty()) {
    fail("{}: a llama2.c checkpoint needs its tokenizer (--tokenizer tokenizer.bin)", o.input);
  }
  convert_llama2c_to_gguf(o.input, o.tokenizer, o.output);
  fmt::print(stderr, "wrote {}\n", o.output);
}

void quantize(const QuantizeOptions& o) {
  const auto target = dtype_from_name(o.type);
  if (!target) fail("unknown type '{}' (choose F32, F16, BF16, Q8_0 or Q4_0)", o.type);
  int fallbacks = 0;
  requantize_gguf(o.input, o.output, *target, [&](const RequantizeNote& note) {
    if (note.fallback) {
      ++fallbacks;
      fmt::print(stderr, "{}: rows of this tensor do not divide into {} blocks; stored as {}\n",
                 note.tensor, dtype_name(*target), dtype_name(note.to));
    }
  });
  fmt::print(stderr, "wrote {} ({} tensors fell back to a higher-precision type)\n", o.output, fallbacks);
}

}  // namespace

void register_convert(CLI::App& app) {
  auto options = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand("convert", "convert a llama2.c checkpoint to GGUF");
  cmd->add_option("input", options->input, "llama2.c checkpoint (.bin)")->required();
  cmd->add_option("--tokenizer", options->tokenizer, "llama2.c tokenizer (tokenizer.bin / tok512.bin)");
  cmd->add_option("-o,--output", options->output, "output GGUF file")->required();
  cmd->callback([options] { convert(*options); });
}

void register_quantize(CLI::App& app) {
  auto options = std::make_shared<QuantizeOptions>();
  CLI::App* cmd = app.add_subcommand("quantize", "re-encode a GGUF model's weights in another format");
  cmd->add_option("input", options->input, "input GGUF")->required();
  cmd->add_option("output", options->output, "output GGUF")->required();
  cmd->add_option("type", options->type, "F32, F16, BF16, Q8_0 or Q4_0")->required();
  cmd->callback([options] { quantize(*options); });
}

}  // namespace kestrel::cli
