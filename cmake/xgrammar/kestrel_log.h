// Kestrel's logging hooks for xgrammar (built with XGRAMMAR_LOG_CUSTOMIZE=1): a fatal error is the
// LogFatalError xgrammar itself throws and catches; a warning (xgrammar's word for "this part of
// the schema is ignored") goes to the calling thread's sink when one is set, so the grammar
// module can refuse such a constraint instead of silently weakening it; otherwise to stderr.
#pragma once

#include <string>
#include <vector>

namespace kestrel_xgrammar {

// Sets (or, with nullptr, clears) this thread's warning sink; returns the previous one.
std::vector<std::string>* set_thread_warning_sink(std::vector<std::string>* sink);

}  // namespace kestrel_xgrammar
