#!/bin/sh
# Folds fresh seeds (make_seeds.py, seed_torch_load) and what long_run.sh found into the committed
# corpora, minimized with libFuzzer's -merge=1 (smallest inputs first, only those that reach new
# edges are kept: -use_counters=0 ignores hit counts, which would keep ten times more), so each
# tests/fuzz/corpus/<name>/ stays small. Usage: make_corpus.sh FUZZ_BUILD_DIR [NAME...]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$1
shift
names=${*:-$(cd "$here/corpus" && ls)}
export UBSAN_OPTIONS="halt_on_error=1:suppressions=$here/ubsan.supp"
for n in $names; do
    merged=$(mktemp -d "${TMPDIR:-/tmp}/mc_fuzz_merge.XXXXXX")
    mkdir -p "$build/seeds/$n" "$build/long/$n"
    "$build/fuzz_$n" -merge=1 -use_counters=0 -timeout=10 -rss_limit_mb=2048 -max_len=65536 "$merged" \
        "$here/corpus/$n" "$build/seeds/$n" "$build/long/$n" > "$build/merge_$n.log" 2>&1 ||
        { tail -n 20 "$build/merge_$n.log"; exit 1; }
    rm -rf "$here/corpus/$n" && mkdir -p "$here/corpus/$n" && cp "$merged"/* "$here/corpus/$n"/
    rm -rf "$merged"
    echo "$n: $(ls "$here/corpus/$n" | wc -l) files, $(du -sk --apparent-size "$here/corpus/$n" | cut -f1) KiB"
done
