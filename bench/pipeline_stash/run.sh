#!/usr/bin/env bash
# Step time of pipeline-parallel training with activation slots (each stage keeps its in-flight
# micro-batches' activations, the default) against the recompute fallback
# (MC_ACTIVATION_MEMORY_LIMIT_MB=0: a stage keeps one micro-batch and re-runs a forward before
# its backward), and the activation bytes per slot of GPT-2 124M.
# usage: bench/pipeline_stash/run.sh [build-dir]   (env: ITERS, LAYOUTS="pp2 pp4 tp2xpp2";
#        pp2xvpp2 = pp2 with --num-virtual-stages-per-pipeline-rank 2, where interleaving exists)
# On the 2-core dev machine the layouts are oversubscribed (2-4 single-threaded ranks on 2
# shared cores): the compute saved shows, the times are not a scaling result.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
bin=$build/bin/pretrain_gpt
[ -x "$bin" ] || { echo "run.sh: $bin not found (build first)" >&2; exit 1; }
iters=${ITERS:-6}
layouts=${LAYOUTS:-"pp2 pp4 tp2xpp2"}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# L=8, h=256, 4 heads, s=128, b=2, global batch 16 (8 micro-batches), vocab 4096, mock data
model=(--num-layers 8 --hidden-size 256 --num-attention-heads 4 --seq-length 128
       --max-position-embeddings 128 --micro-batch-size 2 --global-batch-size 16
       --mock-data --vocab-size 4096 --tokenizer-type NullTokenizer
       --lr 1e-4 --train-iters "$iters" --log-interval 1 --eval-iters 0 --eval-interval 100000)
median_ms() { # median "elapsed time per iteration (ms)" over iterations 2..ITERS
    grep -o 'elapsed time per iteration (ms): [0-9.]*' "$1" | tail -n +2 | awk '{print $NF}' |
        sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'
}
printf '%-10s %5s %14s %14s %8s\n' layout ranks "slots ms" "recompute ms" speedup
for lay in $layouts; do
    tp=1; pp=1; extra=()
    case $lay in
        pp2) pp=2 ;; pp4) pp=4 ;; tp2xpp2) tp=2; pp=2 ;;
        pp2xvpp2) pp=2; extra=(--num-virtual-stages-per-pipeline-rank 2) ;;
        *) echo "run.sh: unknown layout '$lay'" >&2; exit 1 ;;
    esac
    np=$((tp * pp))
    declare -A ms
    for mode in slots recompute; do
        log=$tmp/$lay.$mode.log
        limit=(); [ $mode = recompute ] && limit=(-x MC_ACTIVATION_MEMORY_LIMIT_MB=0)
        mpirun --allow-run-as-root --oversubscribe -np $np -x OMP_NUM_THREADS=1 "${limit[@]}" \
            "$bin" "${model[@]}" --tensor-model-parallel-size $tp \
            --pipeline-model-parallel-size $pp --make-vocab-size-divisible-by $((128 / tp)) \
            --data-cache-path "$tmp/cache" ${extra[@]+"${extra[@]}"} >"$log" 2>&1 \
            || { echo "run.sh: $lay $mode failed:" >&2; tail -20 "$log" >&2; exit 1; }
        ms[$mode]=$(median_ms "$log")
    done
    printf '%-10s %5d %14.1f %14.1f %7.2fx\n' "$lay" $np "${ms[slots]}" "${ms[recompute]}" \
        "$(echo "${ms[recompute]} / ${ms[slots]}" | bc -l)"
done
# activation bytes of GPT-2 124M (12 layers, h 768, s 1024, V 50257) per slot and stage
for pp in 1 2 4; do "$build/tests/gpt_slot_bytes" $pp 1024 1; done
