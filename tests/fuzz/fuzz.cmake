# CTest side of the libFuzzer targets (label `fuzz`, so `make test` / `make check` run them):
#   fuzz_build      configures and builds tests/fuzz/ with clang into <build>/fuzz (every target,
#                   so none can rot), the fixture the others need
#   fuzz_<name>     tests/fuzz/run_target.sh: replays tests/fuzz/corpus/<name>/, then fuzzes
#                   for MC_FUZZ_SECONDS; any crash, sanitizer report, leak or timeout fails it
# Included from the top-level CMakeLists.txt; skipped in the MC_SANITIZE build (the fuzz tree
# has its own sanitizers). Without clang + libFuzzer the fuzz_build test fails, naming them.
set(MC_FUZZ_SECONDS 6 CACHE STRING "Seconds each fuzz_<name> CTest test fuzzes after its corpus replay")
find_program(MC_CLANG NAMES clang clang-14)
file(GLOB MC_FUZZ_TARGETS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/fuzz/fuzz_*.c)
if(NOT MC_SANITIZE)
  set(fuzz_dir ${CMAKE_BINARY_DIR}/fuzz)
  if(MC_CLANG)
    set(launcher "")
    if(CMAKE_C_COMPILER_LAUNCHER)
      set(launcher "-DCMAKE_C_COMPILER_LAUNCHER=${CMAKE_C_COMPILER_LAUNCHER}")
    endif()
    add_test(NAME fuzz_build COMMAND sh -c
      "'${CMAKE_COMMAND}' -S '${CMAKE_SOURCE_DIR}/tests/fuzz' -B '${fuzz_dir}' -DCMAKE_C_COMPILER='${MC_CLANG}' -DMC_BLAS=${MC_BLAS} ${launcher} >/dev/null && '${CMAKE_COMMAND}' --build '${fuzz_dir}' -j 2")
  else()
    add_test(NAME fuzz_build COMMAND sh -c
      "echo 'fuzz_build: clang not found; the libFuzzer targets need clang and libclang-rt-dev (scripts/setup.sh installs them)' >&2; exit 1")
  endif()
  set_tests_properties(fuzz_build PROPERTIES LABELS fuzz FIXTURES_SETUP fuzz TIMEOUT 1800)
  foreach(f ${MC_FUZZ_TARGETS})
    get_filename_component(n ${f} NAME_WE)
    string(REGEX REPLACE "^fuzz_" "" t ${n})
    add_test(NAME ${n} COMMAND sh ${CMAKE_SOURCE_DIR}/tests/fuzz/run_target.sh ${fuzz_dir} ${t} ${MC_FUZZ_SECONDS})
    set_tests_properties(${n} PROPERTIES LABELS fuzz FIXTURES_REQUIRED fuzz TIMEOUT 300)
  endforeach()
endif()
