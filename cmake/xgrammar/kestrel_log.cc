#include "kestrel_log.h"

#include <cstdio>

#include "support/logging.h"

namespace kestrel_xgrammar {
namespace {
thread_local std::vector<std::string>* t_sink = nullptr;
}  // namespace

std::vector<std::string>* set_thread_warning_sink(std::vector<std::string>* sink) {
  std::vector<std::string>* previous = t_sink;
  t_sink = sink;
  return previous;
}

}  // namespace kestrel_xgrammar

namespace xgrammar {

[[noreturn]] void LogFatalImpl(const std::string& file, int lineno, const std::string& message) {
  throw LogFatalError(file, lineno, message);
}

void LogMessageImpl(const std::string& file, int lineno, int level, const std::string& message) {
  if (level != XGRAMMAR_LOG_LEVEL_WARNING) return;  // info/debug: only xgrammar's debug printing
  if (kestrel_xgrammar::t_sink != nullptr) {
    kestrel_xgrammar::t_sink->push_back(message);
    return;
  }
  std::fprintf(stderr, "xgrammar: warning: %s\n", message.c_str());
}

}  // namespace xgrammar
