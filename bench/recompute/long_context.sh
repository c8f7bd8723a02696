#!/bin/sh
# Long context with and without activation recompute, micro-batch 1, fp32, Adam, for each model
# shape, sequence length and recompute setting: the dry run's activation estimate, the
# allocator's accounted peak (--log-memory-estimate), the process's peak resident set (GNU
# time's ru_maxrss) and the wall time of the run (ITERS iterations plus start-up).
#   gpt2:  GPT-2 124M (12 layers, hidden 768, 12 heads, learned positions, LayerNorm, GELU,
#          tied embeddings, GPT-2's 50257-token vocabulary padded to 50304)
#   llama: Llama-style (12 layers, hidden 768, 12 heads, 4 query groups, ffn 2048, RoPE,
#          SwiGLU, RMSNorm, no biases, untied embeddings, vocabulary 32000)
# FLASH=1 (default) adds --use-flash-attn (core attention keeps no [b, heads, s, s]
# probabilities); FLASH=0 runs the unfused path (--attention-backend unfused).
# First the --dry-run count of every case (instant, no memory used), then the runs; a run whose
# dry-run activation estimate passes MAX_ACT_GB (default: 3/4 of MemAvailable) is skipped, and
# every run is bounded by `ulimit -v` (MAX_VM_GB, default 7/8 of MemAvailable) so that a run
# that does not fit fails alone instead of pushing the machine out of memory. Runs are niced
# (NICE, default 19) with OMP_NUM_THREADS (default 1): this is a shared machine.
# Usage: bench/recompute/long_context.sh [build dir] [seq ...]   (default seq: 8192)
# MODELS="gpt2 llama" (default both); RECOMPUTE="none|selective|full uniform 1|auto 6|..."
# (';'-separated; "auto G" is --recompute-auto-budget-gb G); DRY_ONLY=1 prints the estimates
# only; ITERS (default 1); KEEP_LOGS=DIR keeps each run's log there.
set -eu
BUILD=${1:-build}
shift 2>/dev/null || true
[ $# -gt 0 ] || set -- 8192
SETTINGS=${RECOMPUTE:-"none;full uniform 1"}
MODELS=${MODELS:-"gpt2 llama"}
FLASH=${FLASH:-1}
ITERS=${ITERS:-1}
NICE=${NICE:-19}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
avail_kb=$(awk '/MemAvailable/ { print $2 }' /proc/meminfo)
MAX_ACT_GB=${MAX_ACT_GB:-$(awk -v k="$avail_kb" 'BEGIN { printf "%.1f", k * 0.75 / 1048576 }')}
MAX_VM_GB=${MAX_VM_GB:-$(awk -v k="$avail_kb" 'BEGIN { printf "%.1f", k * 0.875 / 1048576 }')}

model_args() { # model seq
    case "$1" in
    gpt2) printf '%s' "--num-layers 12 --hidden-size 768 --num-attention-heads 12 \
--max-position-embeddings $2 --vocab-size 50257" ;;
    llama) printf '%s' "--num-layers 12 --hidden-size 768 --num-attention-heads 12 \
--group-query-attention --num-query-groups 4 --ffn-hidden-size 2048 --swiglu \
--normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights \
--disable-bias-linear --max-position-embeddings $2 --vocab-size 32000" ;;
    *) echo "long_context.sh: model $1: expected gpt2 or llama" >&2; exit 2 ;;
    esac
}

args() { # model seq setting
    model_args "$1" "$2"
    # NullTokenizer's vocabulary is --vocab-size + 1 (its eod); padded to a multiple of 128
    printf '%s' " --seq-length $2 --micro-batch-size 1 --global-batch-size 1 \
--train-iters $ITERS --lr 1e-4 --log-interval 1 --mock-data --tokenizer-type NullTokenizer \
--data-cache-path $TMP/cache --eval-iters 0 --log-memory-estimate"
    if [ "$FLASH" = 1 ]; then printf ' --use-flash-attn'; else printf ' --attention-backend unfused'; fi
    set -- $3
    case "$1" in
    none) ;;
    selective) printf ' --recompute-granularity selective' ;;
    full) printf ' --recompute-granularity full --recompute-method %s --recompute-num-layers %s' "$2" "$3" ;;
    auto) printf ' --recompute-auto-budget-gb %s' "$2" ;;
    esac
}

printf '%-6s %-6s %-16s %14s %14s %14s %8s\n' model seq recompute "dry-run act GB" \
    "accounted MB" "peak RSS MB" "wall s"
for seq in "$@"; do
    for model in $MODELS; do
        echo "$SETTINGS" | tr ';' '\n' | while read -r setting; do
            # shellcheck disable=SC2046
            "$BUILD/bin/pretrain_gpt" $(args "$model" "$seq" "$setting") --dry-run >"$TMP/dry" 2>&1 || true
            act=$(sed -n 's/.*stage 0: \([0-9.]*\) MiB per micro-batch in flight + \([0-9.]*\) MiB shared.*/\1 \2/p' \
                "$TMP/dry" | awk '{ printf "%.2f", ($1 + $2) / 1024 }')
            if [ "${DRY_ONLY:-0}" = 1 ] || awk -v a="$act" -v m="$MAX_ACT_GB" 'BEGIN { exit !(a == "" || a > m) }'; then
                why=$([ "${DRY_ONLY:-0}" = 1 ] && echo "(dry run)" || echo "(> ${MAX_ACT_GB} GB)")
                printf '%-6s %-6s %-16s %14s %14s %14s %8s\n' "$model" "$seq" "$setting" \
                    "${act:-?}" "skipped" "$why" "-"
                continue
            fi
            # shellcheck disable=SC2046
            (ulimit -v "$(awk -v g="$MAX_VM_GB" 'BEGIN { printf "%d", g * 1048576 }')"
             OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} exec nice -n "$NICE" /usr/bin/time -f "%M %e" \
                 -o "$TMP/time" "$BUILD/bin/pretrain_gpt" $(args "$model" "$seq" "$setting")) \
                >"$TMP/out" 2>&1 || true
            acc=$(sed -n 's/^\[Rank 0\]   total allocated *[0-9.n/a]* *\([0-9.]*\).*/\1/p' "$TMP/out")
            # the last line: time puts "Command exited with non-zero status" before it
            rss_kb=$(tail -n 1 "$TMP/time" 2>/dev/null | awk '{ print $1 + 0 }')
            wall=$(tail -n 1 "$TMP/time" 2>/dev/null | awk '{ print $2 }')
            printf '%-6s %-6s %-16s %14s %14s %14.1f %8s\n' "$model" "$seq" "$setting" "$act" \
                "${acc:-failed}" "$(awk -v r="$rss_kb" 'BEGIN { print r / 1024 }')" "$wall"
            if [ -n "${KEEP_LOGS:-}" ]; then
                cp "$TMP/out" "$KEEP_LOGS/$model-$seq-$(echo "$setting" | tr ' ' '_').log"
            fi
        done
    done
done
