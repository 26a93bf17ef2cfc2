// Subcommands of the `kestrel` CLI. Each register_* adds its subcommand and options to the app
// and binds the callback that runs it.
#pragma once

#include <CLI/CLI.hpp>

namespace kestrel::cli {

void register_run(CLI::App& app);
void register_chat(CLI::App& app);
void register_info(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_eval(CLI::App& app);
void register_imatrix(CLI::App& app);
void register_convert(CLI::App& app);
void register_quantize(CLI::App& app);
void register_serve(CLI::App& app);
void register_batch(CLI::App& app);
void register_gen_model(CLI::App& app);
void register_bench(CLI::App& app);

// Thrown by a subcommand that has printed all it had and must still end with a non-zero status
// (run stopped by Ctrl-C: 130); main returns `code` and prints nothing more.
struct ExitStatus {
  int code;
};

// Threads to use when the user gives none: the CPUs this process may use (affinity mask, cgroup
// CPU quota: core/cpu_info.h).
int default_thread_count();

}  // namespace kestrel::cli
