#!/bin/sh
# Peak resident set of pretrain_gpt (the kernel's ru_maxrss, via GNU time) beside the allocator's
# accounted peak (--log-memory-estimate's "total allocated" peak) for a few GPT sizes: fp32, Adam,
# micro-batch 1, 2 iterations. Usage: bench/memory/rss.sh [build dir] ["L h heads seq" ...]
# (docs/memory.md has the numbers). Needs /usr/bin/time.
set -eu
BUILD=${1:-build}
shift 2>/dev/null || true
[ $# -gt 0 ] || set -- "2 128 16 1024" "4 256 8 1024" "4 512 8 1024" "12 768 12 1024"
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
printf '%-20s %12s %12s %8s %8s\n' "L h heads seq" "peak RSS MB" "accounted MB" "ratio" "wall s"
for size in "$@"; do
    set -- $size
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} /usr/bin/time -f "%M %e" -o "$TMP/time" \
        "$BUILD/bin/pretrain_gpt" --num-layers "$1" --hidden-size "$2" \
        --num-attention-heads "$3" --seq-length "$4" --max-position-embeddings "$4" \
        --micro-batch-size 1 --global-batch-size 1 --train-iters 2 --lr 1e-4 --log-interval 1 \
        --mock-data --tokenizer-type NullTokenizer --vocab-size 8192 \
        --data-cache-path "$TMP/cache" --eval-iters 0 --log-memory-estimate >"$TMP/out" 2>&1
    acc=$(sed -n 's/^\[Rank 0\]   total allocated *n\/a *\([0-9.]*\).*/\1/p' "$TMP/out")
    read -r rss_kb wall <"$TMP/time"
    awk -v s="$size" -v r="$rss_kb" -v a="$acc" -v w="$wall" \
        'BEGIN { printf "%-20s %12.1f %12.1f %8.3f %8s\n", s, r / 1024, a, r / 1024 / a, w }'
done
