#include "test_paths.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <vector>

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

namespace {

// The directories this process made, removed when it exits: the runs of a suite (one process per
// test case) would otherwise leave gigabytes of models and logs in the build tree.
struct ScratchDirs {
  pid_t owner = getpid();
  std::vector<std::filesystem::path> dirs;
  ~ScratchDirs() {
    if (getpid() != owner) return;  // a forked child that exits normally leaves them to its parent
    for (const auto& dir : dirs) {
      std::error_code ignored;
      std::filesystem::remove_all(dir, ignored);
    }
  }
};

ScratchDirs& scratch_dirs() {
  static ScratchDirs dirs;
  return dirs;
}

}  // namespace

std::string scratch_dir(const std::string& name) {
  // ctest runs test cases as parallel processes: the pid keeps their directories apart.
  const std::filesystem::path dir = std::filesystem::path(KESTREL_BINARY_DIR) / "test-scratch" /
                                    (name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto& made = scratch_dirs().dirs;
  if (std::find(made.begin(), made.end(), dir) == made.end()) made.push_back(dir);
  return dir.string();
}

std::string text_excerpt(const std::string& scratch_name, const std::string& shared_text, std::size_t bytes) {
  const std::string path = scratch_dir(scratch_name) + "/text.txt";
  std::ofstream(path, std::ios::binary) << read_file(shared_model_path(shared_text)).substr(0, bytes);
  return path;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace kestrel::test
