#!/bin/sh
# Soak: a small GPT trained for thousands of iterations with periodic --save, evaluations and
# --tensorboard-dir, while a sampler records the process's resident memory (VmRSS), open file
# descriptors (/proc/PID/fd) and thread count every few seconds. report.py turns the samples into
# the growth after warm-up (table) and a plot (SVG); docs/soak.md holds a run's result.
# Usage: bench/soak/run.sh [ITERS=8000] [INTERVAL_S=3]
#   env: BUILD=build, OUT=$BUILD/soak (samples.csv, train.log, soak.svg, summary.md), NICE=10
# It is a benchmark, not a CTest test: about 10 minutes at the default size on 2 busy cores.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
iters=${1:-8000}
every=${2:-3}
out=${OUT:-$build/soak}
exe=$build/bin/pretrain_gpt
[ -x "$exe" ] || { echo "run.sh: no $exe; build the project first" >&2; exit 1; }
rm -rf "$out"
mkdir -p "$out"
echo "machine: $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'), load average $(cut -d' ' -f1-3 /proc/loadavg)" \
    | tee "$out/machine.txt"
# 16 saves and 40 evaluations over the run, TensorBoard scalars every iteration: every path that
# opens files or allocates outside the step loop runs many times.
save=$((iters / 16 > 0 ? iters / 16 : 1))
eval=$((iters / 40 > 0 ? iters / 40 : 1))
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} nice -n "${NICE:-10}" "$exe" \
    --num-layers 2 --hidden-size 32 --num-attention-heads 4 --seq-length 32 \
    --max-position-embeddings 32 --micro-batch-size 2 --global-batch-size 4 \
    --train-iters "$iters" --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-warmup-iters 50 \
    --mock-data --tokenizer-type NullTokenizer --vocab-size 4096 \
    --data-cache-path "$out/cache" --transformer-impl local --ckpt-format torch \
    --save "$out/ckpt" --save-interval $save --eval-interval $eval --eval-iters 5 \
    --tensorboard-dir "$out/tb" --log-interval 10 >"$out/train.log" 2>&1 &
pid=$!
t0=$(date +%s.%N)
echo "t_s,iteration,rss_kb,fds,threads" >"$out/samples.csv"
while kill -0 "$pid" 2>/dev/null; do
    rss=$(awk '/^VmRSS:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
    thr=$(awk '/^Threads:/ { print $2 }' "/proc/$pid/status" 2>/dev/null || true)
    fds=$(ls "/proc/$pid/fd" 2>/dev/null | wc -l)
    it=$(sed -n 's/^ \[[^]]*\] iteration *\([0-9]*\)\/.*/\1/p' "$out/train.log" | tail -n 1)
    [ -n "$rss" ] && echo "$(awk -v a="$(date +%s.%N)" -v b="$t0" 'BEGIN { printf "%.1f", a - b }'),${it:-0},$rss,$fds,$thr" >>"$out/samples.csv"
    sleep "$every"
done
wait "$pid" || { echo "run.sh: pretrain_gpt failed; see $out/train.log" >&2; tail -n 5 "$out/train.log" >&2; exit 1; }
"${PYTHON:-python3}" "$here/report.py" "$out"
