#!/bin/sh
# Step time of pp2 (1F1B) against pp2 x vpp2 and vpp4 (interleaved) on the same model:
# 8 layers, hidden 128, seq 128, micro-batch 2, 8 micro-batches per step, 2 ranks with
# OMP_NUM_THREADS=${THREADS:-1} each. Prints each layout's per-iteration times (iterations
# 3..N, sorted) and their median. Usage: bench/vpp/run.sh [build dir] [iterations]
set -e
BUILD=${1:-build}
ITERS=${2:-10}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ARGS="--num-layers 8 --hidden-size 128 --num-attention-heads 8 --mock-data --vocab-size 4096
      --seq-length 128 --max-position-embeddings 128 --micro-batch-size 2 --global-batch-size 16
      --train-iters $ITERS --lr 1e-4 --tokenizer-type NullTokenizer --log-interval 1
      --eval-iters 0 --data-cache-path $TMP --pipeline-model-parallel-size 2"
for vpp in "" "--num-virtual-stages-per-pipeline-rank 2" "--num-virtual-stages-per-pipeline-rank 4"; do
    times=$(mpirun --allow-run-as-root --oversubscribe -np 2 -x OMP_NUM_THREADS=${THREADS:-1} \
            "$BUILD/bin/pretrain_gpt" $ARGS $vpp 2>&1 |
            sed -n 's/.*elapsed time per iteration (ms): \([0-9.]*\).*/\1/p' | tail -n +3 | sort -n)
    median=$(echo "$times" | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}')
    echo "pp2 ${vpp:-(1F1B)}: median $median ms; all: $(echo $times)"
done
