#!/usr/bin/env bash
# One full training step (forward + backward + AdamW) of GPT-2 124M and of a small GPT, megatron.c
# beside PyTorch on the same model and token counts, the same thread count, in the same run.
# Prints tokens/s, the ratio to each PyTorch, and achieved FLOP/s as a fraction of the peak that
# bench/peak measures now, with the CPU model, the kernel table, the GEMM library, the OpenMP
# wait settings and the load average beside the figures. A benchmark, not a test.
#   usage: bench/train_step/run.sh [THREADS]              (default: nproc)
#          bench/train_step/run.sh --breakdown [THREADS]  the step breakdown instead: time per
#            op class and GEMM shape (bench_train_step --breakdown, the timed backend wrapper) of
#            GPT-2 124M at 8x256 and 4x1024, then, where perf works, the share of page faults and
#            of OpenMP waiting (libgomp) in a perf profile of the 8x256 step.
#   ROUNDS=3 (runs per shape, alternating megatron.c and each PyTorch; medians printed)
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cd "$here"
breakdown=0
if [ "${1:-}" = --breakdown ]; then breakdown=1; shift; fi
th=${1:-$(nproc)}
export OMP_NUM_THREADS=$th
make -s build >/dev/null
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs," \
  "flags: $(grep -m1 '^flags' /proc/cpuinfo | grep -oE ' (avx2|fma|f16c|avx512f|avx512bf16|avx512_bf16|avx512fp16|amx_tile)( |$)' | xargs)"
echo "threads=$th OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-unset} GOMP_SPINCOUNT=${GOMP_SPINCOUNT:-unset}, load: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ $breakdown = 1 ]; then
  for shape in "256 8" "1024 4"; do
    read -r s b <<<"$shape"
    echo "== GPT-2 124M ${b}x${s}, 1 warm-up + 2 timed steps, load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    ./build/bench/bench_train_step --breakdown 12 768 12 50304 "$s" "$b" 2 1 2>/dev/null
    echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
  if perf stat -e instructions true >/dev/null 2>&1; then
    echo "== perf: GPT-2 124M 8x256, 1 warm-up + 1 step (page faults; share of samples by object)"
    perf stat -e page-faults,minor-faults,major-faults,task-clock -x, \
      ./build/bench/bench_train_step 12 768 12 50304 256 8 1 1 2>&1 >/dev/null | grep -E 'faults|task-clock'
    pd=$(mktemp -d)
    perf record -q -F 199 -o "$pd/perf.data" ./build/bench/bench_train_step 12 768 12 50304 256 8 1 1 \
      >/dev/null 2>&1
    echo "-- by shared object:"
    perf report -q -i "$pd/perf.data" --sort dso 2>/dev/null | head -8
    echo "-- top symbols (gomp_* / do_wait / futex: OpenMP barriers and spinning):"
    perf report -q -i "$pd/perf.data" --sort dso,symbol 2>/dev/null | head -25
    rm -rf "$pd"
  else
    echo "(perf unavailable here: perf stat -e instructions true failed)"
  fi
  exit 0
fi
# bench/peak prints "fp32 peak (widest FMA: AVX-512|AVX2)  <1 thread>  <2 threads>" in GFLOP/s
peakout=${PEAK_OUT:-$(bash bench/peak/run.sh)}
peak=$(echo "$peakout" | awk -v th="$th" '/^fp32 peak/ {v = (th == 1) ? $(NF-1) : $NF; if (v ~ /^[0-9.]+$/) print v; exit}')
peakrow=$(echo "$peakout" | grep -m1 '^fp32 peak' | sed 's/  .*//')
echo "peak fp32 (bench/peak '$peakrow', $th threads): ${peak:-unknown} GFLOP/s"
# PyTorch peers: Debian's 1.13 (TORCH113=0 leaves it out) and the newest PyPI wheel
# (bench/setup_torch.sh; BENCH_VENV=/path/to/venv picks an existing one)
pytorches=()
[ "${TORCH113:-1}" = 1 ] && pytorches+=(/usr/bin/python3)
if fast=$(bash bench/setup_torch.sh 2>/dev/null | tail -n 1) && [ -x "$fast" ]; then pytorches+=("$fast"); fi
rounds=${ROUNDS:-3}
mc_line=$(./build/bench/bench_train_step 2 64 2 128 16 2 1 0 2>/dev/null)
echo "megatron.c kernels: $(echo "$mc_line" | grep -oE 'kernels=[^ ]+' | cut -d= -f2), GEMM: $(echo "$mc_line" | sed 's/.*gemm=//')"
echo "($rounds rounds per shape, megatron.c and each PyTorch alternating; medians; % of peak from the median;"
echo " 'CPU time x': the peer's CPU-s per step over ours, the figure to read when other jobs share the cores)"
printf "%-10s %-8s %10s %9s %10s %8s  %s\n" model tokens "mc tok/s" "mc %peak" "mc ms" "load" "PyTorch peers (median tok/s, mc/peer ratio)"
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
run() { # name layers hidden heads vocab seq batch iters
  local name=$1 L=$2 h=$3 nh=$4 V=$5 s=$6 b=$7 it=$8
  local load0; load0=$(cut -d' ' -f1 /proc/loadavg)
  local mcs=() mcc=() fl="" pts=() ptc=() vers=() k
  for k in "${!pytorches[@]}"; do pts[k]="" ptc[k]=""; done
  for _ in $(seq "$rounds"); do
    local mc; mc=$(./build/bench/bench_train_step "$L" "$h" "$nh" "$V" "$s" "$b" "$it" 1 2>/dev/null)
    mcs+=("$(echo "$mc" | grep -oE 'tokens_per_s=[0-9.]+' | cut -d= -f2)")
    mcc+=("$(echo "$mc" | grep -oE 'cpu_ms_per_step=[0-9.]+' | cut -d= -f2)")
    fl=$(echo "$mc" | grep -oE 'flops_per_step=[0-9.e+]+' | cut -d= -f2)
    for k in "${!pytorches[@]}"; do
      local pt; pt=$("${pytorches[k]}" bench/train_step/torch_gpt.py "$L" "$h" "$nh" "$V" "$s" "$b" "$it" 1 "$th" 2>/dev/null || echo "failed")
      pts[k]+="$(echo "$pt" | grep -oE 'tokens_per_s=[0-9.]+' | cut -d= -f2 || true) "
      ptc[k]+="$(echo "$pt" | grep -oE 'cpu_ms_per_step=[0-9.]+' | cut -d= -f2 || true) "
      vers[k]=$(echo "$pt" | awk '{print $2}')
    done
  done
  local tps; tps=$(printf "%s\n" "${mcs[@]}" | median)
  local ms; ms=$(awk -v t="$tps" -v n="$((b * s))" 'BEGIN{printf "%.1f", 1e3 * n / t}')
  local pct="?"
  [ -n "$peak" ] && pct=$(awk -v f="$fl" -v ms="$ms" -v p="$peak" 'BEGIN{printf "%.1f%%", 100*f/(ms*1e-3)/(p*1e9)}')
  local peers="" cpu; cpu=$(printf "%s\n" "${mcc[@]}" | median)
  for k in "${!pytorches[@]}"; do
    local ptps ptcpu; ptps=$(printf "%s\n" ${pts[k]} | median) ptcpu=$(printf "%s\n" ${ptc[k]} 0 | median)
    [ -n "${pts[k]// /}" ] && peers+=$(awk -v a="$tps" -v b="$ptps" -v v="${vers[k]}" -v c="$cpu" -v d="$ptcpu" \
      'BEGIN{printf "torch %s: %.1f (x%.2f; CPU time x%.2f)  ", v, b, a/b, (c > 0 && d > 0) ? d/c : 0}')
  done
  printf "%-10s %-8s %10.1f %9s %10s %8s  %s\n" "$name" "${b}x${s}" "$tps" "$pct" "$ms" "$load0-$(cut -d' ' -f1 /proc/loadavg)" "$peers"
}
for shape in ${SHAPES:-small:256x8 gpt2:64x4 gpt2:256x8 gpt2:1024x4}; do
  m=${shape%%:*} t=${shape#*:} s=${t%x*} b=${t#*x}
  it=2; [ "$s" -le 64 ] && it=3
  if [ "$m" = small ]; then run small 4 256 4 8192 "$s" "$b" 5
  else run gpt2-124M 12 768 12 50304 "$s" "$b" "$it"; fi
done
echo "goal (issue 16): >= 85% of the fp32 peak and >= 1.3x PyTorch 2.x at gpt2-124M 8x256"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
