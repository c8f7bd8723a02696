#!/bin/sh
# Long context with and without activation recompute: a GPT-2-124M-shaped model (12 layers,
# hidden 768, 12 heads, GPT-2's 50257-token vocabulary padded to 50304) at micro-batch 1, fp32,
# Adam, 2 iterations, for each sequence length and recompute setting: the model's activation
# bytes (its ' > activation memory' line), the allocator's accounted peak
# (--log-memory-estimate) and the process's peak resident set (GNU time's ru_maxrss).
# First the --dry-run counts of every setting (instant, no memory used), then the runs; a run
# whose dry-run activation estimate passes MAX_ACT_GB (default: 3/4 of MemAvailable) is skipped.
# Usage: bench/recompute/long_context.sh [build dir] [seq ...]   (default seq: 8192)
# Settings: RECOMPUTE="none|selective|full uniform 1|..." (';'-separated) overrides the list.
# Minutes per iteration at 8k on a few cores: run it alone on the machine.
set -eu
BUILD=${1:-build}
shift 2>/dev/null || true
[ $# -gt 0 ] || set -- 8192
SETTINGS=${RECOMPUTE:-"none;selective;full uniform 1;full uniform 4;full block 6"}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
avail_kb=$(awk '/MemAvailable/ { print $2 }' /proc/meminfo)
MAX_ACT_GB=${MAX_ACT_GB:-$(awk -v k="$avail_kb" 'BEGIN { printf "%.1f", k * 0.75 / 1048576 }')}

args() { # seq setting
    printf '%s' "--num-layers 12 --hidden-size 768 --num-attention-heads 12 --seq-length $1 \
--max-position-embeddings $1 --micro-batch-size 1 --global-batch-size 1 --train-iters 2 \
--lr 1e-4 --log-interval 1 --mock-data --tokenizer-type NullTokenizer --vocab-size 50257 \
--data-cache-path $TMP/cache --eval-iters 0 --log-memory-estimate"
    set -- $2
    case "$1" in
    none) ;;
    selective) printf ' --recompute-granularity selective' ;;
    full) printf ' --recompute-granularity full --recompute-method %s --recompute-num-layers %s' "$2" "$3" ;;
    esac
}

printf '%-6s %-16s %14s %14s %14s %8s\n' seq recompute "dry-run act GB" "accounted MB" \
    "peak RSS MB" "wall s"
for seq in "$@"; do
    echo "$SETTINGS" | tr ';' '\n' | while read -r setting; do
        # shellcheck disable=SC2046
        "$BUILD/bin/pretrain_gpt" $(args "$seq" "$setting") --dry-run >"$TMP/dry" 2>&1 || true
        act=$(sed -n 's/.*stage 0: \([0-9.]*\) MiB per micro-batch in flight + \([0-9.]*\) MiB shared.*/\1 \2/p' \
            "$TMP/dry" | awk '{ printf "%.2f", ($1 + $2) / 1024 }')
        if awk -v a="$act" -v m="$MAX_ACT_GB" 'BEGIN { exit !(a == "" || a > m) }'; then
            printf '%-6s %-16s %14s %14s %14s %8s\n' "$seq" "$setting" "$act" "skipped" \
                "(> ${MAX_ACT_GB} GB)" "-"
            continue
        fi
        # shellcheck disable=SC2046
        OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} /usr/bin/time -f "%M %e" -o "$TMP/time" \
            "$BUILD/bin/pretrain_gpt" $(args "$seq" "$setting") >"$TMP/out" 2>&1 || true
        acc=$(sed -n 's/^\[Rank 0\]   total allocated *n\/a *\([0-9.]*\).*/\1/p' "$TMP/out")
        read -r rss_kb wall <"$TMP/time"
        printf '%-6s %-16s %14s %14s %14.1f %8s\n' "$seq" "$setting" "$act" "${acc:-failed}" \
            "$(awk -v r="$rss_kb" 'BEGIN { print r / 1024 }')" "$wall"
    done
done
