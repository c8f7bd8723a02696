#!/usr/bin/env bash
# Speed of pretrain_gpt's training iteration before and after a change, in the same run: two
# pretrain_gpt binaries alternate ROUNDS times on GPT-2 124M with --mock-data and Megatron's
# default dropout (0.1 hidden and attention; bench_train_step runs without dropout, so a change
# to the dropout path shows only here). Each run trains ITERS iterations; the median "elapsed
# time per iteration" of the iterations after the first (start-up and first touch) is the run's
# figure. Prints each run with the load average, then the medians and their ratio (after /
# before), and the lm loss of the last iteration of each run (equal when the change keeps
# the numbers). A benchmark, not a test.
#   usage: bench/train_step/compare_pretrain.sh BEFORE_BIN AFTER_BIN [ROUNDS] [THREADS]
#   SHAPE=1024x4 (SEQxMICRO_BATCH) by default; ITERS=3; EXTRA="..." more pretrain_gpt options
#   (e.g. "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1").
set -euo pipefail
before=$1 after=$2 rounds=${3:-2}
export OMP_NUM_THREADS=${4:-$(nproc)}
shape=${SHAPE:-1024x4} iters=${ITERS:-3}
s=${shape%x*} b=${shape#*x}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), threads=$OMP_NUM_THREADS," \
  "OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset}, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "GPT-2 124M, seq $s, micro-batch $b, $iters iterations per run, extra: ${EXTRA:-none}"
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
# one run: "<median ms per iteration after the first> <last lm loss>"
one() {
  local load log="$tmp/run.log"
  load=$(cut -d' ' -f1 /proc/loadavg)
  # shellcheck disable=SC2086
  "$1" --num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length "$s" \
    --max-position-embeddings "$s" --micro-batch-size "$b" --global-batch-size "$b" \
    --train-iters "$iters" --lr 1e-4 --log-interval 1 --eval-iters 0 --mock-data \
    --tokenizer-type NullTokenizer --vocab-size 50257 --data-cache-path "$tmp/cache" \
    ${EXTRA:-} > "$log" 2>&1 || { echo "compare_pretrain.sh: $1 failed:" >&2; tail -5 "$log" >&2; exit 1; }
  local ms loss
  ms=$(grep -oE 'elapsed time per iteration \(ms\): [0-9.]+' "$log" | awk 'NR > 1 {print $NF}' | median)
  loss=$(grep -oE 'lm loss: [0-9.E+-]+' "$log" | tail -1 | awk '{print $NF}')
  echo "  $2: ms/iteration $ms, last lm loss $loss, load $load" >&2
  echo "$ms $loss"
}
bt=() at=() bl=() al=()
for _ in $(seq "$rounds"); do
  read -r t l < <(one "$before" before); bt+=("$t") bl+=("$l")
  read -r t l < <(one "$after" after); at+=("$t") al+=("$l")
done
mb=$(printf "%s\n" "${bt[@]}" | median) ma=$(printf "%s\n" "${at[@]}" | median)
echo "median ms/iteration: before $mb, after $ma, speed ratio (before / after) $(awk -v x="$mb" -v y="$ma" 'BEGIN { printf "%.3f", x / y }')"
echo "last lm loss: before ${bl[*]}, after ${al[*]}"
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
