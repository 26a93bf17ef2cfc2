#!/usr/bin/env bash
# Creates .venv-bench: the Python side of bench/compare_llamacpp.py (llama.cpp through
# llama-cpp-python, built from source for this CPU, and numpy). Pinned, dependencies included;
# a second run is instant.
# The llama.cpp build takes a long while on 2 cores (20-40 minutes when they are idle, hours when
# they are busy): run it early, e.g.
#   scripts/bench_setup.sh > /tmp/bench_setup.log 2>&1 &     (the build is nice'd already)
# JOBS=N changes the number of build jobs (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-bench
llama_cpp_python="llama-cpp-python==0.3.36"  # builds its vendored llama.cpp from source
dependencies=(
  "numpy==2.2.6"
  "typing-extensions==4.16.0"  # llama-cpp-python's own dependencies, pinned
  "diskcache==5.6.3"
  "jinja2==3.1.6"
  "markupsafe==3.0.4"
)

if [ ! -x "$venv/bin/python" ]; then
  echo "bench_setup: creating $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
fi
"$venv/bin/pip" install -q "${dependencies[@]}"

if "$venv/bin/python" -c "import llama_cpp, sys; sys.exit(llama_cpp.__version__ != '${llama_cpp_python#*==}')" \
    2>/dev/null; then
  echo "bench_setup: $venv is up to date"
  exit 0
fi
# GGML_NATIVE=ON: llama.cpp compiled for this machine's ISA (Kestrel picks its kernels at run
# time, so both use what the CPU has). CMAKE_BUILD_PARALLEL_LEVEL bounds the build's jobs.
echo "bench_setup: building $llama_cpp_python from source (long; nice'd, ${JOBS:-2} jobs)"
CMAKE_ARGS="-DGGML_NATIVE=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF" \
CMAKE_BUILD_PARALLEL_LEVEL="${JOBS:-2}" \
  nice -n 10 "$venv/bin/pip" install -v --no-deps --no-binary llama-cpp-python --no-cache-dir \
  "$llama_cpp_python"
"$venv/bin/python" -c "import llama_cpp, numpy; print('bench_setup: llama_cpp', llama_cpp.__version__, 'numpy', numpy.__version__)"
