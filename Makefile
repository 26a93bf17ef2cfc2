# make run   - install what is missing, build Release, generate text with the default model
# make test  - install what is missing, build Debug with ASan+UBSan, run every test and the fuzzer
MODEL ?= ../shared/models/stories260K.gguf
PROMPT ?= Once upon a time
TOKENS ?= 128
JOBS ?= 2
FUZZ_SECONDS ?= 60

.PHONY: setup release debug run test unit-test fuzz bench clean

setup:
	@scripts/setup.sh

release: setup
	@cmake -S . -B build/release -DCMAKE_BUILD_TYPE=Release -DKESTREL_BUILD_TESTS=OFF > /dev/null
	@cmake --build build/release -j$(JOBS)

debug: setup
	@cmake -S . -B build/debug -DCMAKE_BUILD_TYPE=Debug -DKESTREL_SANITIZE=ON -DKESTREL_BUILD_BENCH=OFF > /dev/null
	@cmake --build build/debug -j$(JOBS)

run: release
	./build/release/tools/kestrel run $(MODEL) -p "$(PROMPT)" -n $(TOKENS)

unit-test: debug
	cd build/debug && ctest --output-on-failure -j$(JOBS)

fuzz: setup
	scripts/run_fuzz.sh $(FUZZ_SECONDS)

test: unit-test fuzz

clean:
	rm -rf build
