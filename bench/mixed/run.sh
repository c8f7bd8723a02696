#!/usr/bin/env bash
# One training step (forward + backward + AdamW) of a small GPT in float32, bfloat16 and
# float16 (Megatron's --bf16 / --fp16: 16-bit weights and activations, fp32 main params and
# grads), beside PyTorch 2.x's best CPU bf16 (torch.autocast, fp32 master weights) and its fp32,
# on the same model, token count and thread count, in the same run. Prints the CPU, the load,
# the CPU kernels and the 16-bit GEMM path the backend chose (its log line). A benchmark, not a
# test.
#   usage: bench/mixed/run.sh [THREADS] [LAYERS HIDDEN HEADS VOCAB SEQ BATCH]
#   ITERS=3 WARMUP=1 by default; ROUNDS=N (default 1) repeats the five runs N times, alternating,
#   and prints each one's median (this 2-core VM's speed drifts by 10-20% between minutes); the PyTorch peer is bench/setup_torch.sh's (or MC_TORCH2);
#   MC_BENCH_FLASH=1 (default): flash attention, as pretrain_gpt's default transformer_engine
#   spec and PyTorch's scaled_dot_product_attention; 0: the unfused attention
#   WIDEN=1 adds a bf16 run with MC_GEMM16=copies (the widened fp32 GEMM a CPU without fast
#   bf16 dot products takes: a stand-in for it on a CPU that has them); TORCH=0 skips PyTorch
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
th=${1:-$(nproc)}
shift || true
shape=(${@:-4 256 4 8192 256 8})
export OMP_NUM_THREADS=$th
it=${ITERS:-3} wu=${WARMUP:-1}
bin=./build/bench/bench_mixed_step
[ -x "$bin" ] || { echo "build first: cmake --build build (missing $bin)" >&2; exit 1; }
echo "machine: $(lscpu | grep 'Model name' | cut -d: -f2 | xargs), threads=$th, load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: layers hidden heads vocab seq batch = ${shape[*]}; $it timed steps after $wu"
py=${MC_TORCH2:-}
[ -n "$py" ] || py=$(bash bench/setup_torch.sh 2>/dev/null || true)
rounds=${ROUNDS:-1}
n_tok=$(( shape[4] * shape[5] ))
declare -A ms_of
names=()
add() { # name step_ms: one round's time (empty: the run failed)
  [[ " ${names[*]} " == *" $1 "* ]] || names+=("$1")
  ms_of[$1]="${ms_of[$1]:-} ${2:-failed}"
}
for r in $(seq "$rounds"); do
  for dt in float32 bfloat16 float16; do
    out=$("$bin" "$dt" "${shape[@]}" "$it" "$wu" 2>&1)
    if [ "$r" = 1 ]; then
      if [ "$dt" = float32 ]; then
        echo "$out" | grep -m1 -o 'CPU kernels: .*' | sed 's/^/  /' || true
        echo "$out" | grep -m1 -o 'attention=.*' | sed 's/^/  /' || true
      fi
      echo "$out" | grep -m1 -o '16-bit GEMM .*' | sed 's/^/  /' || true
    fi
    add "megatron.c $dt" "$(echo "$out" | grep -oE 'step_ms=[0-9.]+' | cut -d= -f2)"
  done
  if [ "${WIDEN:-0}" = 1 ]; then
    out=$(MC_GEMM16=copies "$bin" bfloat16 "${shape[@]}" "$it" "$wu" 2>&1)
    add "megatron.c bf16 widened" "$(echo "$out" | grep -oE 'step_ms=[0-9.]+' | cut -d= -f2)"
  fi
  if [ -n "$py" ] && [ "${TORCH:-1}" = 1 ]; then
    for dt in float32 bfloat16; do
      out=$("$py" bench/mixed/torch_autocast.py "$dt" "${shape[@]}" "$it" "$wu" "$th" 2>/dev/null || echo failed)
      ver=$(echo "$out" | awk '{print $2}')
      label="torch $ver $dt"; [ "$dt" = bfloat16 ] && label="torch $ver autocast bf16"
      add "$label" "$(echo "$out" | grep -oE 'step_ms=[0-9.]+' | cut -d= -f2)"
    done
  fi
done
[ -n "$py" ] || echo "(no PyTorch 2.x: run bench/setup_torch.sh or set MC_TORCH2)"
echo "$rounds round(s), alternating; median step time (all rounds' times beside it):"
printf "%-28s %10s %10s  %s\n" run "tok/s" "step ms" "rounds (ms)"
for nm in "${names[@]}"; do
  med=$(echo ${ms_of[$nm]} | tr ' ' '\n' | grep -v failed | sort -g | awk '{a[NR]=$1} END {if (NR) print (NR % 2 ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2)}')
  tps=$([ -n "$med" ] && awk -v n="$n_tok" -v m="$med" 'BEGIN {printf "%.1f", n / m * 1000}')
  printf "%-28s %10s %10s  %s\n" "$nm" "${tps:-failed}" "${med:-}" "${ms_of[$nm]# }"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
