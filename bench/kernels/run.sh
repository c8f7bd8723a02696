#!/bin/sh
# Builds bench_kernels against the library of an existing build (default ./build) and runs it.
set -e
here=$(cd "$(dirname "$0")" && pwd)
root=$here/../..
build=${BUILD_DIR:-$root/build}
gcc -std=c11 -O2 -fopenmp -D_GNU_SOURCE -I"$root/include" -I"$root/src" "$here/bench_kernels.c" \
    "$build/libmegatron.a" -ldnnl $(pkg-config --libs openblas) -lm -o "$build/bench_kernels"
"$build/bench_kernels"
