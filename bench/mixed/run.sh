#!/usr/bin/env bash
# One training step (forward + backward + AdamW) of a small GPT in float32, bfloat16 and
# float16 (Megatron's --bf16 / --fp16: 16-bit weights and activations, fp32 main params and
# grads), beside PyTorch 2.x's best CPU bf16 (torch.autocast, fp32 master weights) and its fp32,
# on the same model, token count and thread count, in the same run. Prints the CPU, the load,
# the CPU kernels and the 16-bit GEMM path the backend chose (its log line). A benchmark, not a
# test.
#   usage: bench/mixed/run.sh [THREADS] [LAYERS HIDDEN HEADS VOCAB SEQ BATCH]
#   ITERS=3 WARMUP=1 by default; the PyTorch peer is bench/setup_torch.sh's (or MC_TORCH2)
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
printf "%-28s %10s %10s\n" run "tok/s" "step ms"
for dt in float32 bfloat16 float16; do
  out=$("$bin" "$dt" "${shape[@]}" "$it" "$wu" 2>&1)
  if [ "$dt" = float32 ]; then
    echo "$out" | grep -m1 -o 'CPU kernels: .*' | sed 's/^/  /' || true
  fi
  echo "$out" | grep -m1 -o '16-bit GEMM .*' | sed 's/^/  /' || true
  tps=$(echo "$out" | grep -oE 'tokens_per_s=[0-9.]+' | cut -d= -f2)
  ms=$(echo "$out" | grep -oE 'step_ms=[0-9.]+' | cut -d= -f2)
  printf "%-28s %10s %10s\n" "megatron.c $dt" "${tps:-failed}" "${ms:-}"
done
if [ -n "$py" ]; then
  for dt in float32 bfloat16; do
    out=$("$py" bench/mixed/torch_autocast.py "$dt" "${shape[@]}" "$it" "$wu" "$th" 2>/dev/null || echo failed)
    ver=$(echo "$out" | awk '{print $2}')
    tps=$(echo "$out" | grep -oE 'tokens_per_s=[0-9.]+' | cut -d= -f2)
    ms=$(echo "$out" | grep -oE 'step_ms=[0-9.]+' | cut -d= -f2)
    label="torch $ver $dt"; [ "$dt" = bfloat16 ] && label="torch $ver autocast bf16"
    printf "%-28s %10s %10s\n" "$label" "${tps:-failed}" "${ms:-}"
  done
else
  echo "(no PyTorch 2.x: run bench/setup_torch.sh or set MC_TORCH2)"
fi
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
