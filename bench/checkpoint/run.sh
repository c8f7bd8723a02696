#!/bin/sh
# Checkpoint save/load throughput: our torch.save/torch.load (bench_ckpt.c, built here with the
# project's flags against build/libmegatron) beside torch 1.13's on the same GPT-2-124M-sized
# state dict (model + Adam state, ~1.5 GB fp32), in one run, same disk; best of REPEATS rounds.
# Usage: bench/checkpoint/run.sh [REPEATS=3]  (env: BUILD=build, CC, PYTHON, CKPT_DIR)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
reps=${1:-3}
py=${PYTHON:-/usr/bin/python3}
dir=${CKPT_DIR:-$build/bench-ckpt}
mkdir -p "$dir"
lib=$(ls "$build"/libmegatron.* 2>/dev/null | head -n 1)
[ -n "$lib" ] || { echo "run.sh: no libmegatron in $build; build the project first" >&2; exit 1; }
${CC:-cc} -std=c11 -O2 -Wall -Wextra -Werror -I"$root/include" -I"$root/src" \
    "$here/bench_ckpt.c" "$lib" -o "$dir/bench_ckpt" -lm -fopenmp
echo "machine: $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), torch $("$py" -c 'import torch; print(torch.__version__)')"
# Rounds alternate ours and torch's, one save + load each, so both see the same machine load;
# the summary takes the best of the rounds for each column.
ours="" theirs=""
i=0
while [ "$i" -lt "$reps" ]; do
    rm -f "$dir/ours.pt" "$dir/torch.pt" # a new file each time, as a new iter_* directory is
    ours="$ours $("$dir/bench_ckpt" "$dir/ours.pt" 1)"
    theirs="$theirs $("$py" "$here/bench_torch.py" "$dir/torch.pt" 1)"
    echo "round $((i + 1)): load average $(cut -d' ' -f1-3 /proc/loadavg)"
    i=$((i + 1))
done
rm -f "$dir/ours.pt" "$dir/torch.pt"
"$py" - "$ours" "$theirs" <<'PY'
import json, sys
def best(runs):
    rs = [json.loads(x) for x in runs.replace("} {", "}\n{").splitlines() if x.strip()]
    return {k: min(r[k] for r in rs) for k in rs[0]}
o, t = best(sys.argv[1]), best(sys.argv[2])
for k, what in (("save", "save (fsync'ed)"), ("save_nosync", "save before fsync"),
                ("sync", "final flush+fsync"), ("load", "load")):
    go, gt = o["gb"] / o[k + "_s"], t["gb"] / t[k + "_s"]
    print("%-18s megatron.c %.3f s = %5.2f GB/s, torch %.3f s = %5.2f GB/s, ratio %.2fx"
          % (what + ":", o[k + "_s"], go, t[k + "_s"], gt, go / gt))
print("state dict: %.3f GB in %d tensors (ours %d)" % (t["gb"], t["tensors"], o["tensors"]))
PY
