#!/bin/sh
# Builds the libFuzzer harness for the torch.load-equivalent reader with clang (not part of the
# CMake build: CI uses gcc), seeds the corpus with real torch.save files (ours and torch 1.13's),
# fuzzes for $FUZZ_TIME seconds (default 480) and merges the result back into tests/fuzz/corpus/.
# Usage: tests/fuzz/run.sh [seconds]   (env: CLANG, PYTHON, FUZZ_JOBS)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${FUZZ_OUT:-$root/build-fuzz}
time=${1:-${FUZZ_TIME:-480}}
cc=${CLANG:-clang}
py=${PYTHON:-/usr/bin/python3}
mkdir -p "$out/obj" "$out/seeds" "$out/new" "$here/corpus"
san="-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined"
srcs="src/checkpointing/torch_pickle.c src/checkpointing/torch_serialization.c
      src/checkpointing/torch_zip.c src/core/alloc.c src/core/status.c src/core/log.c"
objs=""
for s in $srcs; do
    o="$out/obj/$(basename "$s" .c).o"
    "$cc" -std=c11 -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer-no-link,address,undefined \
        -I"$root/include" -I"$root/src" -c "$root/$s" -o "$o"
    objs="$objs $o"
done
"$cc" -std=c11 -g -O1 -D_GNU_SOURCE $san -I"$root/include" -I"$root/src" -I"$here" \
    "$here/fuzz_torch_load.c" $objs -o "$out/fuzz_torch_load" -lm -fopenmp
echo "built $out/fuzz_torch_load"
# Seeds: small files from torch.save (torch 1.13) and from our writer (the C unit test's file).
"$py" "$here/make_seeds.py" "$out/seeds"
"$cc" -std=c11 -g -O1 -D_GNU_SOURCE -fsanitize=address,undefined -I"$root/include" -I"$root/src" \
    "$here/make_seed_ours.c" "$root/src/checkpointing/torch_pickle.c" \
    "$root/src/checkpointing/torch_serialization.c" "$root/src/checkpointing/torch_zip.c" \
    "$root/src/core/alloc.c" "$root/src/core/status.c" "$root/src/core/log.c" \
    -o "$out/make_seed_ours" -lm -fopenmp
"$out/make_seed_ours" "$out/seeds/ours.pt"
echo "fuzzing for ${time}s"
"$out/fuzz_torch_load" -max_total_time="$time" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$out/" "$out/new" "$here/corpus" "$out/seeds" \
    2>&1 | tail -n 12
# Keep a minimal corpus that covers the same edges.
mkdir -p "$out/merged"
"$out/fuzz_torch_load" -merge=1 "$out/merged" "$here/corpus" "$out/seeds" "$out/new" 2>&1 | tail -n 3
rm -rf "$here/corpus" && mv "$out/merged" "$here/corpus"
echo "corpus: $(ls "$here/corpus" | wc -l) files, $(du -sk "$here/corpus" | cut -f1) KiB"
