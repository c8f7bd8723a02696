#!/bin/sh
# The GEMM libraries PyPI offers beside Debian's oneDNN 2.6.3 (the backend's default), on the
# same GPT-2 124M shapes (bench_gemm.c), in one run: Intel MKL (the `mkl` wheel, libmkl_rt with
# GNU OpenMP threading) and oneDNN 3.2 (`onednn-cpu-gomp`, GNU OpenMP). The wheels are
# downloaded into the build directory (nothing is installed); the newest `onednn` wheel
# (2026.x) is not tried: it is built for Intel's SYCL/TBB runtimes (libsycl, libsvml, libimf),
# which are not on a Debian machine. Usage: bench/gemm/pypi_libs.sh [T] [threads...]
# (default: T 2048, threads 1 2). Needs a quiet machine; prints the CPU beside the figures.
set -e
here=$(cd "$(dirname "$0")" && pwd)
out=${BUILD_DIR:-$here/../../build}/bench
libs=$out/pypi-libs
T=${1:-2048}
shift 2>/dev/null || true
threads=${*:-1 2}
mkdir -p "$libs"
if [ ! -d "$libs/ex" ]; then
    [ -n "$(ls "$libs"/*.whl 2>/dev/null)" ] ||
        python3 -m pip download --no-deps -q -d "$libs" mkl==2026.2.0 onednn-cpu-gomp==2023.2.0
    for w in "$libs"/*.whl; do python3 -m zipfile -e "$w" "$libs/ex"; done
fi
mkl=$(dirname "$(find "$libs/ex" -name libmkl_rt.so.3 | head -1)")
dnnl3=$(dirname "$(find "$libs/ex" -name libdnnl.so.3 | head -1)")
cc="gcc -std=c11 -O2 -fopenmp -D_GNU_SOURCE"
# MKL exports cblas_sgemm; the OpenBLAS thread and core calls of bench_gemm.c are mapped to it
cat > "$libs/mkl_shim.c" <<'EOF'
void MKL_Set_Num_Threads(int);
void openblas_set_num_threads(int n) { MKL_Set_Num_Threads(n); }
char *openblas_get_corename(void) { return "MKL 2026.2 (PyPI)"; }
EOF
$cc -DUSE_OPENBLAS -I/usr/include/x86_64-linux-gnu/openblas-pthread "$here/bench_gemm.c" \
    "$libs/mkl_shim.c" -o "$out/gemm_mkl" -L"$mkl" -l:libmkl_rt.so.3 -Wl,-rpath,"$mkl"
$cc -DUSE_DNNL "$here/bench_gemm.c" -o "$out/gemm_onednn3" -L"$dnnl3" -l:libdnnl.so.3 \
    -Wl,-rpath,"$dnnl3"
$cc -DUSE_DNNL "$here/bench_gemm.c" -o "$out/gemm_onednn" -ldnnl
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load: $(cut -d' ' -f1-3 /proc/loadavg)"
for th in $threads; do
    for lib in onednn onednn3 mkl; do
        printf '%s, %s threads: ' "$lib" "$th"
        MKL_THREADING_LAYER=GNU OMP_NUM_THREADS=$th "$out/gemm_$lib" "$th" "$T" "${MIN_S:-0.3}" |
            grep TOTAL
    done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
