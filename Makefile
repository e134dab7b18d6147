# Thin driver over CMake, in the manner of Neovim's: `make` builds, `make test`
# installs what a fresh Debian 12 lacks, builds and runs every test through ctest.
BUILD       ?= build
ASAN_BUILD  ?= build-asan
FUZZ_BUILD  ?= build-fuzz
FUZZ_SECONDS ?= 30
JOBS        ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

.PHONY: all deps test test-main test-stress test-asan test-fuzz fuzz-long bench load soak poc install env clean

all: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) $(CMAKE_FLAGS)

deps:
	@scripts/install-deps

# Fuzzing and the sanitizer build first, so the run ends with the main summary.
test: deps
	$(MAKE) --no-print-directory test-fuzz test-asan test-main

test-main: all
	cd $(BUILD) && ctest --output-on-failure $(CTEST_FLAGS)

# Not part of `make test`: the specs again while a CPU load runs beside them
# (STRESS_PER_CORE busy loops per core, default 2; STRESS_RUNS runs in a row,
# default 1), so a spec that depends on speed fails here (scripts/test-stress).
test-stress: all
	scripts/test-stress $(BUILD) $(CTEST_FLAGS)

# C tests again under AddressSanitizer and UndefinedBehaviorSanitizer.
test-asan:
	cmake -S . -B $(ASAN_BUILD) -DDSH_SANITIZE=ON -DDSH_SPECS=OFF -DCMAKE_BUILD_TYPE=Debug
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	cd $(ASAN_BUILD) && ctest --output-on-failure -L '^c$$' $(CTEST_FLAGS)

# Every decoder under libFuzzer for FUZZ_SECONDS each.
test-fuzz:
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DDSH_FUZZ=ON -DDSH_SPECS=OFF -DDSH_FUZZ_SECONDS=$(FUZZ_SECONDS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	cd $(FUZZ_BUILD) && ctest --output-on-failure -L '^fuzz$$' $(CTEST_FLAGS)

# The long run: every fuzz target, one at a time, for FUZZ_RUNS executions
# each (FUZZ_CAP seconds at most), then a summary per target (docs/fuzzing.md).
FUZZ_RUNS ?= 10000000
FUZZ_CAP  ?= 14400
fuzz-long:
	CC=clang cmake -S . -B $(FUZZ_BUILD) -DDSH_FUZZ=ON -DDSH_SPECS=OFF -DDSH_FUZZ_SECONDS=$(FUZZ_SECONDS)
	cmake --build $(FUZZ_BUILD) -j $(JOBS)
	FUZZ_RUNS=$(FUZZ_RUNS) FUZZ_SECONDS=$(FUZZ_CAP) scripts/fuzz-long $(FUZZ_BUILD)

bench: all
	bench/run $(BUILD)

# Not part of `make test`: bounded in time, each ends by itself with a summary.
load: all
	bench/run $(BUILD) load

soak: all
	bench/run $(BUILD) soak

poc: deps all
	bin/dsh poc

# PREFIX=/some/where installs there instead of the configured prefix
# (/usr/local); bin/dsh finds its modules relative to itself.
PREFIX ?=
install: all
	cmake --install $(BUILD) $(if $(PREFIX),--prefix '$(PREFIX)')

# One setup line for the REPL: eval "$(make -s env)"
env:
	@echo 'export LUA_PATH="$(CURDIR)/lua/?.lua;$(CURDIR)/lua/?/init.lua;;"'
	@echo 'export DSH_HOME="$(CURDIR)"'
	@echo 'export PATH="$(CURDIR)/bin:$$PATH"'

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(FUZZ_BUILD)
