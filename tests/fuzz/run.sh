#!/bin/sh
# The fuzzing campaign, end to end: builds every libFuzzer target with clang into
# build/fuzz (tests/fuzz/CMakeLists.txt), fuzzes each in turn for SECONDS (default 180; one at
# a time, nice'd: long_run.sh) from its corpus and fresh torch-free seeds (make_seeds.py,
# seed_torch_load.c), then minimizes the findings back into tests/fuzz/corpus/ (make_corpus.sh).
# Usage: tests/fuzz/run.sh [SECONDS] [NAME...]   (env: CLANG, default clang; FUZZ_OUT)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${FUZZ_OUT:-$root/build/fuzz}
secs=${1:-180}
[ $# -gt 0 ] && shift
cmake -S "$here" -B "$out" -DCMAKE_C_COMPILER="${CLANG:-clang}" >/dev/null
cmake --build "$out" -j 2
"$here/long_run.sh" "$out" "$secs" "$@"
"$here/make_corpus.sh" "$out" "$@"
