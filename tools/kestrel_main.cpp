// kestrel: the command-line entry point. Errors are reported as one line on stderr with exit
// status 1; nothing is left half-written.
#include <cstdio>
#include <exception>

#include "commands.h"
#include "core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"Kestrel: LLM inference engine"};
  app.require_subcommand(1);
  kestrel::cli::register_run(app);
  kestrel::cli::register_chat(app);
  kestrel::cli::register_info(app);
  kestrel::cli::register_perplexity(app);
  kestrel::cli::register_eval(app);
  kestrel::cli::register_imatrix(app);
  kestrel::cli::register_convert(app);
  kestrel::cli::register_quantize(app);
  kestrel::cli::register_serve(app);
  kestrel::cli::register_batch(app);
  kestrel::cli::register_gen_model(app);
  kestrel::cli::register_bench(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kestrel::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
