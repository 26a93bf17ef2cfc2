// What every subcommand checks in its arguments, so that a bad one is one readable line naming the
// option (main prints "error: --top-p: must be a number > 0 and <= 1 (got 2)" and exits 2):
//   int_range, number_range  numeric options. CLI11's own Range prints its bounds with
//                            std::to_string (a 300-digit figure for PositiveNumber's DBL_MAX), lets
//                            NaN through (every comparison with NaN is false) and accepts an int64
//                            that overflowed (strtoll clamps it).
//   existing_file            options that name an input file: it must exist, be no directory and
//                            be readable (checked at parse time, before any model is loaded).
//   read_input_file          reads such a file; also an error when it is empty. perplexity, eval,
//                            imatrix, quantize --calib, batch -i, bench --prompt-file and the
//                            grammar files all read through it.
//   kernel_type_named        a type name given to an option (quantize's per-tensor types,
//                            imatrix --compute-type).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

#include "core/dtype.h"

namespace kestrel::cli {

// An integer in [min, max] (decimal, or 0x hex as CLI11 converts it).
CLI::Validator int_range(int64_t min, int64_t max);

enum class Bound { Closed, Open };
// A finite number in the interval min..max, each end closed (included) or open (excluded).
CLI::Validator number_range(double min, double max, Bound lower = Bound::Closed, Bound upper = Bound::Closed);

// Why `path` cannot be read as an input file ("no such file", "is a directory, not a file",
// "cannot read: Permission denied"), or "" when it can.
std::string file_problem(const std::string& path);
CLI::Validator existing_file();

// The whole file; a clear error naming `option` when the file is missing, a directory,
// unreadable or empty.
std::string read_input_file(const std::string& path, std::string_view option);

// The type named `name` (given to `option`), which must have kernels; else a clear error
// "OPTION NAME: not a type Kestrel can USE" (USE: "write", "compute with").
DType kernel_type_named(const std::string& name, std::string_view option, std::string_view use);

}  // namespace kestrel::cli
