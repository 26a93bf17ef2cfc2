// Paths of the shared test models and of test data, fixed at configure time.
#pragma once

#include <cstddef>
#include <string>

namespace kestrel::test {

// ../shared/models beside the project root.
std::string shared_model_path(const std::string& relative);
// The default model (scripts/fetch_default_model.sh; KESTREL_DEFAULT_MODEL overrides it).
std::string default_model_path();
// tests/data in the source tree.
std::string test_data_path(const std::string& relative);
// A fresh scratch directory for one test process (removed and recreated; removed again when the
// process exits).
std::string scratch_dir(const std::string& name);
// Reads a whole file; fails the test if it cannot.
std::string read_file(const std::string& path);
// The first `bytes` bytes of the shared text `shared_text` (a ../shared/models path) written to a
// file in scratch directory `scratch_name`; its path (calibration text for the CLI's -f).
std::string text_excerpt(const std::string& scratch_name, const std::string& shared_text, std::size_t bytes);

}  // namespace kestrel::test
