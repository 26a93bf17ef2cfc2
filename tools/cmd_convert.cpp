// kestrel convert: llama2.c checkpoint + tokenizer -> GGUF; kestrel quantize: re-encode weights.
#include <cstdio>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "commands.h"
#include "convert/hf_convert.h"
#include "convert/llama2c.h"
#include "convert/requantize.h"
#include "core/error.h"
#include "loader/hf_folder.h"

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
  int threads = 0;
  std::string imatrix;
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

void quantize(const QuantizeOptions& o) {
  const auto recipe = find_quant_recipe(o.type);
  if (!recipe) fail("unknown quantization type '{}' (choose one of: {})", o.type, quant_recipe_names());
  std::optional<ImportanceMatrix> imatrix;
  if (!o.imatrix.empty()) {
    imatrix = load_imatrix(o.imatrix);
    fmt::print(stderr, "imatrix {}: {} matrices, {} chunks of {} tokens\n", o.imatrix, imatrix->entries.size(),
               imatrix->chunk_count, imatrix->chunk_size);
  }
  int fallbacks = 0, weighted = 0, unweighted = 0;
  std::string unweighted_names;
  requantize_gguf(o.input, o.output, *recipe, [&](const RequantizeNote& note) {
    if (note.fallback) {
      ++fallbacks;
      fmt::print(stderr, "{}: rows of this tensor do not divide into {} blocks; stored as {}\n",
                 note.tensor, dtype_name(note.wanted), dtype_name(note.to));
    }
    if (imatrix && note.from != note.to && note.to != DType::F32) {
      if (note.weighted) {
        ++weighted;
      } else {
        ++unweighted;
        unweighted_names += (unweighted_names.empty() ? "" : ", ") + fmt::format("{} ({})", note.tensor, dtype_name(note.to));
      }
    }
  }, o.threads, imatrix ? &*imatrix : nullptr);
  if (imatrix) {
    fmt::print(stderr, "imatrix: {} tensors quantized with importance weights, {} without{}{}\n", weighted,
               unweighted, unweighted > 0 ? " (no entry or no weighted quantizer for the type): " : "",
               unweighted_names);
  }
  fmt::print(stderr, "wrote {} ({}; {} tensors fell back to a higher-precision type)\n", o.output,
             recipe->name, fallbacks);
}

}  // namespace

void register_convert(CLI::App& app) {
  auto options = std::make_shared<ConvertOptions>();
  CLI::App* cmd = app.add_subcommand("convert", "convert a Hugging Face folder or a llama2.c checkpoint to GGUF");
  cmd->add_option("input", options->input, "Hugging Face model folder, or llama2.c checkpoint (.bin)")->required();
  cmd->add_option("--tokenizer", options->tokenizer, "llama2.c tokenizer (tokenizer.bin / tok512.bin)");
  cmd->add_option("-o,--output", options->output, "output GGUF file")->required();
  cmd->callback([options] { convert(*options); });
}

void register_quantize(CLI::App& app) {
  auto options = std::make_shared<QuantizeOptions>();
  CLI::App* cmd = app.add_subcommand("quantize", "re-encode a GGUF model's weights in another format");
  cmd->add_option("input", options->input, "input GGUF")->required();
  cmd->add_option("output", options->output, "output GGUF")->required();
  cmd->add_option("type", options->type,
                  "one type for every matrix (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, INT8_PC, "
                  "INT4_SYM_G32/G64/G128, INT4_ASYM_G32/G64/G128, FP8_E4M3_PC) or a llama.cpp "
                  "mixture (Q4_K_S, Q4_K_M, Q5_K_S, Q5_K_M). Note: llama-quantize's Q4_K means "
                  "Q4_K_M; here Q4_K is Q4_K for every matrix")
      ->required();
  cmd->add_option("-t,--threads", options->threads, "threads (default: one per hardware thread)");
  cmd->add_option("--imatrix", options->imatrix,
                  "importance matrix (kestrel imatrix or llama-imatrix, GGUF or legacy .dat): Q4_K, Q5_K "
                  "and Q6_K tensors minimise the importance-weighted error");
  cmd->callback([options] { quantize(*options); });
}

}  // namespace kestrel::cli
