#include "cli_checks.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "quant/format.h"

namespace kestrel::cli {

CLI::Validator int_range(int64_t min, int64_t max) {
  const std::string wanted = fmt::format("must be an integer from {} to {}", min, max);
  return CLI::Validator(
      [min, max, wanted](std::string& input) -> std::string {
        // strtoll with base 0, as CLI11 converts integers; ERANGE: it clamped an overflow.
        char* end = nullptr;
        errno = 0;
        const long long value = std::strtoll(input.c_str(), &end, 0);
        const bool parsed = !input.empty() && end == input.c_str() + input.size() && errno != ERANGE;
        if (parsed && value >= min && value <= max) return "";
        return fmt::format("{} (got {})", wanted, input);
      },
      fmt::format("{}..{}", min, max));
}

CLI::Validator number_range(double min, double max, Bound lower, Bound upper) {
  const bool open_min = lower == Bound::Open, open_max = upper == Bound::Open;
  const std::string wanted =
      fmt::format("must be a number {} {} and {} {}", open_min ? ">" : ">=", min, open_max ? "<" : "<=", max);
  return CLI::Validator(
      [=](std::string& input) -> std::string {
        char* end = nullptr;
        const long double value = std::strtold(input.c_str(), &end);
        const bool parsed = !input.empty() && end == input.c_str() + input.size() && std::isfinite(value);
        const bool above = open_min ? value > min : value >= min;
        const bool below = open_max ? value < max : value <= max;
        if (parsed && above && below) return "";
        return fmt::format("{} (got {})", wanted, input);
      },
      fmt::format("{}{}, {}{}", open_min ? "(" : "[", min, max, open_max ? ")" : "]"));
}

std::string file_problem(const std::string& path) {
  struct stat st {};
  if (path.empty()) return "no file named";
  if (::stat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? "no such file" : fmt::format("cannot read: {}", std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return "is a directory, not a file";
  if (::access(path.c_str(), R_OK) != 0) return fmt::format("cannot read: {}", std::strerror(errno));
  return "";
}

CLI::Validator existing_file() {
  return CLI::Validator(
      [](std::string& path) -> std::string {
        const std::string problem = file_problem(path);
        return problem.empty() ? "" : fmt::format("{}: {}", path, problem);
      },
      "FILE");
}

DType kernel_type_named(const std::string& name, std::string_view option, std::string_view use) {
  const auto type = dtype_from_name(name);
  if (!type || quant::find_format(*type) == nullptr) fail("{} {}: not a type Kestrel can {}", option, name, use);
  return *type;
}

std::string read_input_file(const std::string& path, std::string_view option) {
  const std::string problem = file_problem(path);
  if (!problem.empty()) fail("{} {}: {}", option, path, problem);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{} {}: cannot read", option, path);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) fail("{} {}: read failed", option, path);
  // An empty file is always a mistake here (a wrong path, a failed redirect): say so rather than
  // score 0 tokens or run 0 requests.
  if (text.str().empty()) fail("{} {}: the file is empty", option, path);
  return text.str();
}

}  // namespace kestrel::cli
