#!/usr/bin/env bash
# One full training step (forward + backward + AdamW) of GPT-2 124M and of a small GPT, megatron.c
# beside PyTorch on the same model and token counts, the same thread count, in the same run.
# Prints tokens/s, the ratio to each PyTorch, and achieved FLOP/s as a fraction of the peak that
# bench/peak measures now. A benchmark, not a test.
#   usage: bench/train_step/run.sh [THREADS]      (default: nproc)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
th=${1:-$(nproc)}
export OMP_NUM_THREADS=$th
make -s build >/dev/null
# bench/peak prints "fp32 peak (widest FMA: AVX-512|AVX2)  <1 thread>  <2 threads>" in GFLOP/s
peakout=$(bash bench/peak/run.sh)
peak=$(echo "$peakout" | awk -v th="$th" '/^fp32 peak/ {v = (th == 1) ? $(NF-1) : $NF; if (v ~ /^[0-9.]+$/) print v; exit}')
peakrow=$(echo "$peakout" | grep -m1 '^fp32 peak' | sed 's/  .*//')
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), threads=$th, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "peak fp32 (bench/peak '$peakrow', $th threads): ${peak:-unknown} GFLOP/s"
pytorches=(/usr/bin/python3)
if fast=$(bash bench/setup_torch.sh 2>/dev/null); then pytorches+=("$fast"); fi
printf "%-8s %-14s %12s %10s %10s  %s\n" model tokens "mc tok/s" "mc %peak" "mc ms" "PyTorch peers (tok/s, mc/peer ratio)"
run() { # name layers hidden heads vocab seq batch iters
  local name=$1 L=$2 h=$3 nh=$4 V=$5 s=$6 b=$7 it=$8
  local mc; mc=$(./build/bench/bench_train_step "$L" "$h" "$nh" "$V" "$s" "$b" "$it" 1 2>/dev/null)
  local tps; tps=$(echo "$mc" | grep -oE 'tokens_per_s=[0-9.]+' | cut -d= -f2)
  local ms; ms=$(echo "$mc" | grep -oE 'step_ms=[0-9.]+' | cut -d= -f2)
  local fl; fl=$(echo "$mc" | grep -oE 'flops_per_step=[0-9.e+]+' | cut -d= -f2)
  local pct="?"
  [ -n "$peak" ] && pct=$(awk -v f="$fl" -v ms="$ms" -v p="$peak" 'BEGIN{printf "%.1f%%", 100*f/(ms*1e-3)/(p*1e9)}')
  local peers=""
  for py in "${pytorches[@]}"; do
    local pt; pt=$("$py" bench/train_step/torch_gpt.py "$L" "$h" "$nh" "$V" "$s" "$b" "$it" 1 "$th" 2>/dev/null || echo "failed")
    local ptps; ptps=$(echo "$pt" | grep -oE 'tokens_per_s=[0-9.]+' | cut -d= -f2 || true)
    local ver; ver=$(echo "$pt" | awk '{print $2}')
    if [ -n "$ptps" ]; then
      peers+=$(awk -v a="$tps" -v b="$ptps" -v v="$ver" 'BEGIN{printf "torch %s: %.1f (x%.2f)  ", v, b, a/b}')
    fi
  done
  printf "%-8s %-14s %12.1f %10s %10.1f  %s\n" "$name" "${b}x${s}" "$tps" "$pct" "$ms" "$peers"
}
run small 4 256 4 8192 256 8 5
run gpt2-124M 12 768 12 50304 64 4 3
run gpt2-124M 12 768 12 50304 256 8 2
run gpt2-124M 12 768 12 50304 1024 4 2
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
