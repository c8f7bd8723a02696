#!/bin/sh
# Builds and runs the peak-FLOP/s microbenchmark (bench/peak/peak.c).
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${BUILD_DIR:-$here/../../build}/bench
mkdir -p "$out"
gcc -std=gnu11 -O2 -fopenmp "$here/peak.c" -o "$out/peak"
"$out/peak"
