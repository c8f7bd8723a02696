# Thin wrapper over CMake so the README's commands stay short.
#   make            build Release into build/ (binaries in build/bin/)
#   make test       build, then run every CTest test (unit, kernel, parity, golden, mpi)
#   make asan       ASan+UBSan build of the C tests in build-asan/, then run them
#   make setup      install the Debian packages the build and tests need (scripts/setup.sh)
#   make check      setup (+ the HF venv for the converter tests), then test, then asan:
#                   the README's test command and CI
#   make demo       setup, build, then the main job (scripts/demo.sh)
JOBS ?= $(shell nproc)
BUILD ?= build

.PHONY: all build test asan setup clean demo check
all: build

$(BUILD)/CMakeCache.txt:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release

build: $(BUILD)/CMakeCache.txt
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

asan:
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DMC_SANITIZE=ON
	cmake --build build-asan -j $(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j $(JOBS) -LE "python|mpi"
	# OpenMPI's own start-up allocations (libmpi, unloaded MCA plugins) are never freed, so
	# leak detection is off for MPI tests; memory errors and UB are still fatal there.
	cd build-asan && ASAN_OPTIONS=detect_leaks=0 ctest --output-on-failure -j $(JOBS) -L mpi

check: setup
	bash scripts/setup_hf_venv.sh $(BUILD) \
	  || echo "setup: warning: no $(BUILD)/hf-venv; tests/convert/test_convert_hf.py will fail"
	$(MAKE) test
	$(MAKE) asan

setup:
	bash scripts/setup.sh

demo: setup build
	bash scripts/demo.sh

clean:
	rm -rf $(BUILD) build-asan
