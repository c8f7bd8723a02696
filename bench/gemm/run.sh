#!/bin/sh
# Builds bench_gemm against OpenBLAS, BLIS (OpenMP) and oneDNN and runs it on the GPT-2 124M
# shapes for 1 and 2 threads. Usage: bench/gemm/run.sh [T...]   (default: 256 2048)
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${BUILD_DIR:-$here/../../build}/bench
mkdir -p "$out"
cc="gcc -std=c11 -O2 -fopenmp -D_GNU_SOURCE"
$cc -DUSE_OPENBLAS -I/usr/include/x86_64-linux-gnu/openblas-pthread "$here/bench_gemm.c" -o "$out/gemm_openblas" -lopenblas
$cc -DUSE_BLIS -I/usr/include/x86_64-linux-gnu/blis-openmp "$here/bench_gemm.c" -o "$out/gemm_blis" -L/usr/lib/x86_64-linux-gnu/blis-openmp -l:libblis.so.4
$cc -DUSE_DNNL "$here/bench_gemm.c" -o "$out/gemm_onednn" -ldnnl
Ts=${*:-256 2048}
for T in $Ts; do
  for th in 1 2; do
    for lib in openblas blis onednn; do
      OMP_NUM_THREADS=$th "$out/gemm_$lib" "$th" "$T" "${MIN_S:-0.3}"
    done
  done
done
for lib in openblas blis onednn; do "$out/gemm_$lib" det 2 512; done
for lib in openblas blis onednn; do OMP_NUM_THREADS=2 "$out/gemm_$lib" mix 2 1024; done
# The backend's own tiled path (gemm_blas, the library chosen by cmake): bench_gemm_tiled is built
# by CMake into build/bench. CPU clock on 1 thread, wall clock on 2.
if [ -x "$out/bench_gemm_tiled" ]; then
  for T in $Ts; do
    BENCH_CPUTIME=1 OMP_NUM_THREADS=1 "$out/bench_gemm_tiled" "$T" "${MIN_S:-0.3}"
    OMP_NUM_THREADS=2 "$out/bench_gemm_tiled" "$T" "${MIN_S:-0.3}"
  done
fi
