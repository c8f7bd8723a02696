#!/usr/bin/env bash
# Speed of one training step before and after a change, in the same run: two bench_train_step
# binaries (e.g. one built from the parent commit in another worktree) alternate on GPT-2 124M at
# 8x256 and 4x1024 tokens, ROUNDS times each, and the median tokens/s of each and their ratio
# (after / before) are printed. Alternating spreads any drift in the machine's load over both.
# A benchmark, not a test.
#   usage: bench/train_step/compare.sh BEFORE_BIN AFTER_BIN [ROUNDS] [THREADS]
#   ITERS=2 WARMUP=1 (the timed and untimed steps of each run) by default
set -euo pipefail
before=$1 after=$2 rounds=${3:-5}
export OMP_NUM_THREADS=${4:-$(nproc)}
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), threads=$OMP_NUM_THREADS, load: $(cut -d' ' -f1-3 /proc/loadavg)"
tps() { "$1" 12 768 12 50304 "$2" "$3" "${ITERS:-2}" "${WARMUP:-1}" 2>/dev/null | grep -oE 'tokens_per_s=[0-9.]+' | cut -d= -f2; }
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
printf "%-10s %12s %12s %8s\n" tokens "before tok/s" "after tok/s" ratio
for shape in "256 8" "1024 4"; do
  read -r s b <<<"$shape"
  a=() z=()
  for _ in $(seq "$rounds"); do
    a+=("$(tps "$before" "$s" "$b")")
    z+=("$(tps "$after" "$s" "$b")")
  done
  ma=$(printf "%s\n" "${a[@]}" | median) mz=$(printf "%s\n" "${z[@]}" | median)
  printf "%-10s %12.1f %12.1f %8.3f\n" "${b}x${s}" "$ma" "$mz" "$(awk -v x="$mz" -v y="$ma" 'BEGIN{print x / y}')"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
