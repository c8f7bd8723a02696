#!/bin/sh
# Runs one libFuzzer target as CI does: replays its committed corpus (tests/fuzz/corpus/<name>/
# and the inputs that once failed, tests/fuzz/regressions/<name>/), then fuzzes for SECONDS more
# from it, writing what it finds to a scratch directory (the committed corpus is only changed by
# tests/fuzz/make_corpus.sh). A crash, a sanitizer report,
# a leak, a 10 s input or an RSS over 2 GiB fails the run; the input is kept as
# <build>/artifacts/<name>-crash-... for tests/fuzz/README.md's steps.
# Usage: run_target.sh FUZZ_BUILD_DIR NAME SECONDS [EXTRA_CORPUS_DIR...]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=$1 name=$2 secs=$3
shift 3
bin="$build/fuzz_$name"
corpus="$here/corpus/$name"
regress="$here/regressions/$name" # inputs that once crashed it (kept whatever their coverage)
[ -x "$bin" ] || { echo "run_target.sh: $bin not built (run the fuzz_build test first)" >&2; exit 1; }
[ -d "$corpus" ] || { echo "run_target.sh: no corpus $corpus" >&2; exit 1; }
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$here/ubsan.supp"
scratch=$(mktemp -d "${TMPDIR:-/tmp}/mc_fuzz_$name.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
new=${FUZZ_NEW:-$scratch} # where new inputs go (long_run.sh keeps them)
mkdir -p "$build/artifacts"
flags="-timeout=10 -rss_limit_mb=2048 -max_len=65536 -print_final_stats=1 -artifact_prefix=$build/artifacts/$name-"
echo "== $name: replaying $(ls "$corpus" | wc -l) corpus files"
# shellcheck disable=SC2086
[ -d "$regress" ] || regress=$corpus
"$bin" $flags -runs=0 "$corpus" "$regress" "$@"
echo "== $name: fuzzing for ${secs}s"
# shellcheck disable=SC2086
"$bin" $flags -max_total_time="$secs" "$new" "$corpus" "$@"
