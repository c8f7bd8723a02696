#!/usr/bin/env bash
# Data-pipeline benchmark: preprocessing throughput (megatron.c vs Megatron vs HF tokenizers)
# on a >= 100 MB corpus, and index building for 10M documents (megatron.c vs Megatron's
# IndexedDatasetBuilder). Needs a Release build in build/, MEGATRON_ROOT (Megatron-LM at
# core_v0.12.1), shared/ (GPT-2 files, megatron-cpu/run_preprocess.py), and
# `/usr/bin/python3 -m pip install --break-system-packages tokenizers`.
# usage: MEGATRON_ROOT=... bash bench/data/run_bench.sh SHARED_DIR [N_DOCS=10000000] [MB=110]
set -euo pipefail
cd "$(dirname "$0")/../.."
shared=$(realpath "$1"); ndocs=${2:-10000000}; mb=${3:-110}
work=$(mktemp -d /tmp/mc_bench_data.XXXXXX)
trap 'rm -rf "$work"' EXIT
gcc -std=c11 -D_GNU_SOURCE -O2 -Iinclude -o "$work/bench_index" bench/data/bench_index.c \
    build/libmegatron.a -fopenmp -lm
echo "== index building, $ndocs documents"
"$work/bench_index" "$work/c" "$ndocs" | tee "$work/c.txt"
/usr/bin/python3 bench/data/bench_index_megatron.py "$work/p" "$ndocs" | tee "$work/p.txt"
for f in c.bin c.idx c_merged.bin c_merged.idx; do
  cmp "$work/$f" "$work/p${f#c}" || { echo "MISMATCH $f"; exit 1; }
done
echo "outputs byte-identical to Megatron's"
/usr/bin/python3 - "$work/c.txt" "$work/p.txt" <<'PY'
import re, sys
c = dict(re.findall(r"(\w+)=([\d.]+)", open(sys.argv[1]).read()))
p = dict(re.findall(r"(\w+)=([\d.]+)", open(sys.argv[2]).read()))
print("build: megatron.c %.1fx faster; merge: %.1fx faster" % (
    float(p["py_build_s"]) / float(c["c_build_s"]), float(p["py_merge_s"]) / float(c["c_merge_s"])))
PY
rm -f "$work"/c* "$work"/p*
echo "== preprocessing, ${mb} MB corpus"
/usr/bin/python3 bench/data/gen_corpus.py "$work/corpus.jsonl" "$mb"
/usr/bin/python3 bench/data/bench_preprocess.py "$work/corpus.jsonl" build "$shared" 1 2
