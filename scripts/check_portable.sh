#!/usr/bin/env bash
# Compiles the portable part of Kestrel for aarch64 (Debian's g++-aarch64-linux-gnu cross compiler):
# every source file of src/ and tools/ but the x86 kernel files (*_avx2.cpp, *_avx512.cpp), so no
# x86 intrinsic or header leaks into code that must build on ARM (Apple silicon, ARM servers).
# Objects are compiled (-O0, warnings as for the x86 build) and thrown away; nothing is linked,
# since the libraries' aarch64 builds are not installed. The header-only libraries come from the
# host's /usr/include (and /usr/include/eigen3), searched after the cross compiler's own headers;
# xgrammar's headers from its unpacked source package (scripts/fetch_xgrammar.sh).
#   scripts/check_portable.sh [JOBS]
set -euo pipefail
cd "$(dirname "$0")/.."
cxx=aarch64-linux-gnu-g++
if ! command -v "$cxx" > /dev/null; then
  echo "check_portable: $cxx is missing (scripts/setup.sh installs g++-aarch64-linux-gnu)" >&2
  exit 1
fi
jobs=${1:-2}
xgrammar=$(scripts/fetch_xgrammar.sh)  # structured output's grammar engine: its headers
mapfile -t files < <(find src tools -name '*.cpp' ! -name '*_avx2.cpp' ! -name '*_avx512.cpp' | sort)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
printf '%s\n' "${files[@]}" | xargs -P "$jobs" -I{} sh -c \
  "$cxx -std=c++20 -O0 -Wall -Wextra -Wno-unused-parameter -Werror=implicit-function-declaration -Isrc -Icmake/xgrammar -isystem $xgrammar/include -isystem $xgrammar/3rdparty/dlpack/include -idirafter /usr/include -idirafter /usr/include/eigen3 -c {} -o /dev/null || echo 'FAILED {}'" \
  > "$log" 2>&1 || true
if grep -q '^FAILED ' "$log"; then
  cat "$log" >&2
  echo "check_portable: $(grep -c '^FAILED ' "$log") of ${#files[@]} files do not compile for aarch64" >&2
  exit 1
fi
echo "check_portable: ${#files[@]} portable source files compile for aarch64"
