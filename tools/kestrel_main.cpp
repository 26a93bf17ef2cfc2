// kestrel: the command-line entry point. Exit statuses (README "Exit status"): 0 done; 1 an error
// while running, one "error: ..." line on stderr, nothing left half-written; 2 a bad command line
// (an unknown option, a number out of range, a missing file), one "error: ..." line naming the
// option; 130 `run` stopped by Ctrl-C.
#include <cstdio>
#include <exception>
#include <string>

#include "commands.h"
#include "core/error.h"

namespace {

// CLI11's default is the error plus a second line pointing at --help, and an exit status per error
// kind (105, 106, 109, ...); one line and one status are easier for people and scripts.
constexpr int kUsageExitStatus = 2;

std::string usage_error(const CLI::App* app, const CLI::Error& e) {
  const auto subcommands = app->get_subcommands();
  const std::string help = subcommands.empty() ? "kestrel --help" : "kestrel " + subcommands[0]->get_name() + " --help";
  return "error: " + std::string(e.what()) + " (" + help + " lists the options)\n";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Kestrel: LLM inference engine"};
  app.require_subcommand(1);
  app.failure_message(usage_error);
  app.footer("Exit status: 0 done; 1 an error while running; 2 a bad command line; 130 `run` stopped by Ctrl-C.");
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
    // --help and --version are "errors" with status 0: CLI11 prints them.
    return app.exit(e) == 0 ? 0 : kUsageExitStatus;
  } catch (const kestrel::cli::ExitStatus& status) {
    return status.code;
  } catch (const kestrel::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
