#!/usr/bin/env bash
# Communication benchmark (issue 5): runs a small GPT under mpirun for several parallel
# layouts with MC_COMM_STATS=1 and prints, per rank and group, the bytes sent per training
# step (measured by the counters in the communication wrappers) beside the theoretical
# minimum for that layout, and the step time.
# usage: bench/comm/run.sh [build-dir]     (env: ITERS, LAYOUTS="dp2 tp2 tp2xpp2xdp2 ...")
# A layout is any product of tpN, ppN, dpN joined by 'x' (missing factors are 1), optionally
# followed by +distopt. On the 2-core dev machine every layout is oversubscribed (up to 8
# ranks on 2 cores, one OpenMP thread each): step times are reported, not tuned, and are not
# a scaling result.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../build}
bin=$build/bin/pretrain_gpt
[ -x "$bin" ] || { echo "run.sh: $bin not found (build first)" >&2; exit 1; }
iters=${ITERS:-4}
layouts=${LAYOUTS:-"single dp2 dp4 tp2 tp4 pp2 pp4 tp2xdp2 pp2xdp2 tp2xpp2 dp2+distopt
         tp2+sp tp4+sp tp2xpp2+sp
         tp2xpp2xdp2 tp2xdp4 tp4xdp2 pp2xdp4 pp4xdp2 tp2xpp4 tp4xpp2 tp2xpp2xdp2+distopt
         tp2xpp2xdp2+sp"}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# GPT-2-style model: L=4, h=256, 4 heads, s=128, b=2, global batch 16, vocab 4096 (mock data)
model=(--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128
       --max-position-embeddings 128 --micro-batch-size 2 --global-batch-size 16
       --mock-data --vocab-size 4096 --tokenizer-type NullTokenizer
       --lr 1e-4 --train-iters "$iters" --log-interval 1 --eval-iters 0 --eval-interval 100000
       --attention-dropout 0 --hidden-dropout 0)
for lay in $layouts; do
    tp=1; pp=1; dp=1; extra=(); sp=()
    spec=$lay
    case $spec in *+sp) sp=(--sequence-parallel); spec=${spec%+sp} ;; esac
    case $spec in *+distopt) extra=(--use-distributed-optimizer); spec=${spec%+distopt} ;; esac
    [ "$lay" = single ] && spec=""
    for f in ${spec//x/ }; do
        case $f in
            tp[0-9]*) tp=${f#tp} ;; pp[0-9]*) pp=${f#pp} ;; dp[0-9]*) dp=${f#dp} ;;
            *) echo "run.sh: unknown layout '$lay' (expected e.g. tp2xpp2xdp2+distopt)" >&2
               exit 1 ;;
        esac
    done
    np=$((tp * pp * dp))
    log=$tmp/$lay.log
    if [ "$lay" = single ]; then  # the same model in one process: the step-time baseline
        OMP_NUM_THREADS=1 "$bin" "${model[@]}" --data-cache-path "$tmp/cache" >"$log" 2>&1 \
            || { echo "run.sh: the single-process run failed:" >&2; tail -20 "$log" >&2; exit 1; }
    else MC_COMM_STATS=1 mpirun --allow-run-as-root --oversubscribe -np $np -x OMP_NUM_THREADS=1 \
        -x MC_COMM_STATS "$bin" "${model[@]}" --tensor-model-parallel-size $tp \
        --pipeline-model-parallel-size $pp --make-vocab-size-divisible-by $((128 / tp)) \
        --data-cache-path "$tmp/cache" "${extra[@]}" ${sp[@]+"${sp[@]}"} >"$log" 2>&1 \
        || { echo "run.sh: layout $lay failed:" >&2; tail -20 "$log" >&2; exit 1; }
    fi
    /usr/bin/python3 "$here/report.py" "$log" --layout "$lay" --tp $tp --pp $pp --dp $dp \
        --iters "$iters" --layers 4 --hidden 256 --seq 128 --mbs 2 --gbs 16 --vocab 4096 \
        ${extra[@]+--distopt} ${sp[@]+--sp} | tee -a "$tmp/report.txt"
done
echo "== summary (step times oversubscribed on this machine, not a scaling result)"
grep -h "summary\|one process" "$tmp/report.txt" | sed 's/^ *summary /   /; s/^== /   /'

