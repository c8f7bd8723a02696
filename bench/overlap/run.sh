#!/usr/bin/env bash
# --overlap-grad-reduce / --overlap-param-gather benchmark: the GPT of bench/comm (L=4, h=256,
# s=128, b=2, global batch 16, vocab 4096, mock data) at dp2 and dp4, with and without the
# distributed optimizer, each in three modes:
#   none      no overlap: one bucket, reduced after the whole backward (Megatron's default)
#   blocking  --overlap-grad-reduce buckets, but every collective blocking where it would
#             start (MC_DDP_BLOCKING=1): the per-bucket cost of each collective
#   overlap   --overlap-grad-reduce (+ --overlap-param-gather with distopt): non-blocking
#   noprog    overlap without the MPI_Test calls between layers (MC_DDP_PROGRESS=0): MPI then
#             progresses a bucket only inside other MPI calls
# and prints the median step time, the time finish_grad_sync still waits (what overlap did not
# hide), the per-bucket collective times, and the DP bytes per step against the ring minimum
# (bench/comm/report.py). MC_DDP_TRACE=1 and MC_COMM_STATS=1 supply the numbers.
# usage: bench/overlap/run.sh [build-dir]   (env: ITERS, LAYOUTS="dp2 dp4 dp2+distopt ...",
#        BUCKET: --ddp-bucket-size, default 1000000 elements, several buckets for this model)
# On the 2-core dev machine the layouts are oversubscribed (one OpenMP thread per rank): the
# numbers are reported, not tuned, and are not a scaling result.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
bin=$build/bin/pretrain_gpt
[ -x "$bin" ] || { echo "run.sh: $bin not found (build first)" >&2; exit 1; }
iters=${ITERS:-6}
bucket=${BUCKET:-1000000}
layouts=${LAYOUTS:-"dp2 dp4 dp2+distopt dp4+distopt"}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
model=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128
       --max-position-embeddings 128 --micro-batch-size 2 --global-batch-size 16
       --mock-data --vocab-size 4096 --tokenizer-type NullTokenizer
       --lr 1e-4 --train-iters "$iters" --log-interval 1 --eval-iters 0 --eval-interval 100000
       --attention-dropout 0 --hidden-dropout 0 --data-cache-path "$tmp/cache")
for lay in $layouts; do
    dp=${lay%%+*}; dp=${dp#dp}; extra=(); distopt=
    case $lay in *+distopt) extra=(--use-distributed-optimizer); distopt=--distopt ;; esac
    for mode in none blocking overlap noprog; do
        ov=(); blk=0; prog=1
        [ $mode = none ] || ov=(--overlap-grad-reduce --ddp-bucket-size "$bucket")
        [ $mode = blocking ] && blk=1
        [ $mode = noprog ] && prog=0
        [ $mode != none ] && [ $mode != blocking ] && [ -n "$distopt" ] && \
            ov+=(--overlap-param-gather)
        log=$tmp/$lay.$mode.log
        MC_COMM_STATS=1 MC_DDP_TRACE=1 MC_DDP_BLOCKING=$blk MC_DDP_PROGRESS=$prog mpirun \
            --allow-run-as-root --oversubscribe -np "$dp" -x OMP_NUM_THREADS=1 -x MC_COMM_STATS \
            -x MC_DDP_TRACE -x MC_DDP_BLOCKING -x MC_DDP_PROGRESS "$bin" "${model[@]}" "${extra[@]}" "${ov[@]}" >"$log" 2>&1 \
            || { echo "run.sh: $lay $mode failed:" >&2; tail -20 "$log" >&2; exit 1; }
    done
    /usr/bin/python3 "$here/report.py" --layout "$lay" "$tmp/$lay".{none,blocking,overlap,noprog}.log
    /usr/bin/python3 "$here/../comm/report.py" "$tmp/$lay.overlap.log" --layout "$lay overlap" \
        --tp 1 --pp 1 --dp "$dp" --iters "$iters" --layers 4 --hidden 256 --seq 128 --mbs 2 \
        --gbs 16 --vocab 4096 $distopt | grep -E "^==|rank|  0 dp"
done
