// kestrel convert: a Hugging Face folder or a llama2.c checkpoint + tokenizer -> GGUF.
#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "cli_checks.h"
#include "commands.h"
#include "convert/hf_convert.h"
#include "convert/llama2c.h"
#include "core/error.h"
#include "loader/hf_folder.h"

namespace kestrel::cli {
namespace {

struct ConvertOptions {
  std::string input;
  std::string tokenizer;
  std::string output;
};

void convert(const ConvertOptions& o) {
  if (is_hf_folder(o.input)) {
    convert_hf_to_gguf(o.input, o.output);
  } else {
    if (o.tokenizer.empty()) {
      fail("{}: a llama2.c checkpoint needs its tokenizer (--tokenizer tokenizer.bin); a Hugging "
           "Face model is a folder with config.json",
           o.input);
    }
    convert_llama2c_to_gguf(o.input, o.tokenizer, o.output);
  }
  fmt::print(stderr, "wrote {}\n", o.output);
}

}  // namespace

void register_convert(CLI::App& app) {
  auto options = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand("convert", "convert a Hugging Face folder or a llama2.c checkpoint to GGUF");
  cmd->add_option("input", options->input, "Hugging Face model folder, or llama2.c checkpoint (.bin)")->required();
  cmd->add_option("--tokenizer", options->tokenizer, "llama2.c tokenizer (tokenizer.bin / tok512.bin)")
      ->check(existing_file());
  cmd->add_option("-o,--output", options->output, "output GGUF file")->required();
  cmd->callback([options] { convert(*options); });
}

}  // namespace kestrel::cli
