#!/usr/bin/env bash
# Speed of one training step before and after a change, in the same run: two bench_train_step
# binaries (e.g. one built from the parent commit in another worktree, or a script that execs the
# same binary under other settings) alternate on GPT-2 124M, ROUNDS times each per shape, and the
# median tokens/s and process CPU ms per step of each and their ratio (after / before) are
# printed, with the load average beside every run. Alternating spreads any drift in the machine's
# load over both. A benchmark, not a test.
#   usage: bench/train_step/compare.sh BEFORE_BIN AFTER_BIN [ROUNDS] [THREADS]
#   ITERS=2 WARMUP=1 (the timed and untimed steps of each run) by default;
#   SHAPES="256x8 1024x4" (SEQxBATCH, GPT-2 124M) by default.
set -euo pipefail
before=$1 after=$2 rounds=${3:-5}
export OMP_NUM_THREADS=${4:-$(nproc)}
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), threads=$OMP_NUM_THREADS," \
  "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-unset}, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "before: $before"
echo "after:  $after"
# one run: "<tok/s> <cpu ms per step> <loss_last>", and its line on stderr
one() {
  local load out
  load=$(cut -d' ' -f1 /proc/loadavg)
  out=$("$1" 12 768 12 50304 "$2" "$3" "${ITERS:-2}" "${WARMUP:-1}" 2>/dev/null | grep '^megatron.c')
  local tps cpu loss
  tps=$(echo "$out" | grep -oE 'tokens_per_s=[0-9.]+' | cut -d= -f2)
  cpu=$(echo "$out" | grep -oE 'cpu_ms_per_step=[0-9.]+' | cut -d= -f2 || echo "?")
  loss=$(echo "$out" | grep -oE 'loss_last=[0-9.]+' | cut -d= -f2)
  echo "  $4 ${3}x${2}: tok/s $tps, cpu ms/step ${cpu:-?}, loss_last $loss, load $load" >&2
  echo "$tps ${cpu:-0} $loss"
}
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
rows=()
for shape in ${SHAPES:-256x8 1024x4}; do
  s=${shape%x*} b=${shape#*x}
  at=() ac=() zt=() zc=() al=() zl=()
  for _ in $(seq "$rounds"); do
    read -r t c l < <(one "$before" "$s" "$b" before); at+=("$t") ac+=("$c") al+=("$l")
    read -r t c l < <(one "$after" "$s" "$b" after); zt+=("$t") zc+=("$c") zl+=("$l")
  done
  mat=$(printf "%s\n" "${at[@]}" | median) mzt=$(printf "%s\n" "${zt[@]}" | median)
  mac=$(printf "%s\n" "${ac[@]}" | median) mzc=$(printf "%s\n" "${zc[@]}" | median)
  same=yes
  [ "$(printf "%s\n" "${al[@]}" | sort -u)" = "$(printf "%s\n" "${zl[@]}" | sort -u)" ] || same=NO
  rows+=("$(printf "%-8s %12.1f %12.1f %8.3f %12.0f %12.0f %8.3f %6s" "${b}x${s}" "$mat" "$mzt" \
    "$(awk -v x="$mzt" -v y="$mat" 'BEGIN{print x / y}')" "$mac" "$mzc" \
    "$(awk -v x="$mac" -v y="$mzc" 'BEGIN{print (y > 0) ? x / y : 0}')" "$same")")
done
printf "%-8s %12s %12s %8s %12s %12s %8s %6s\n" tokens "before tok/s" "after tok/s" ratio \
  "before cpu" "after cpu" "cpu b/a" "=loss"
printf "%s\n" "${rows[@]}"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
