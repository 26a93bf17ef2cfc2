#include "test_paths.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace kestrel::test {

std::string shared_model_path(const std::string& relative) {
  return std::string(KESTREL_SHARED_MODELS) + "/" + relative;
}

std::string default_model_path() {
  if (const char* env = std::getenv("KESTREL_DEFAULT_MODEL")) return env;
  return KESTREL_DEFAULT_MODEL;
}

std::string test_data_path(const std::string& relative) {
  return std::string(KESTREL_TEST_DATA) + "/" + relative;
}

std::string scratch_dir(const std::string& name) {
  // ctest runs test cases as parallel processes: the pid keeps their directories apart.
  const std::filesystem::path dir = std::filesystem::path(KESTREL_BINARY_DIR) / "test-scratch" /
                                    (name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kestrel::test
