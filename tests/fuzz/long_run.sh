#!/bin/sh
# The campaign behind tests/fuzz/README.md's table: every target in turn (one at a time, nice'd)
# for SECONDS each (default 180) from its corpus and fresh seeds; new inputs go to
# <build>/long/<name>/ and each run's log to <build>/long/<name>.log (the last lines hold
# libFuzzer's stat::number_of_executed_units). Then run make_corpus.sh to fold them in.
# Usage: long_run.sh FUZZ_BUILD_DIR [SECONDS] [NAME...]
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=$1 secs=${2:-180}
shift; [ $# -gt 0 ] && shift
names=${*:-$(cd "$here/corpus" && ls)}
mkdir -p "$build/long" "$build/seeds"
/usr/bin/python3 "$here/make_seeds.py" "$build/seeds"
mkdir -p "$build/seeds/torch_load" && "$build/seed_torch_load" "$build/seeds/torch_load/ours.pt"
for n in $names; do
    mkdir -p "$build/long/$n" "$build/seeds/$n"
    FUZZ_NEW="$build/long/$n" nice -n 19 "$here/run_target.sh" "$build" "$n" "$secs" "$build/seeds/$n" \
        > "$build/long/$n.log" 2>&1
    echo "$n: exit $? $(grep -E 'number_of_executed_units|ERROR|SUMMARY' "$build/long/$n.log" | tail -n 2 | tr '\n' ' ')"
done
