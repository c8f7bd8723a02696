#!/bin/sh
# Checkpoint save/load throughput: our torch.save/torch.load (bench_ckpt.c, built here with the
# project's flags against build/libmegatron) beside torch 1.13's on the same GPT-2-124M-sized
# state dict (model + Adam state, ~1.5 GB fp32), in one run, same disk; best of 2 x REPEATS.
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
# Two rounds of REPEATS saves + loads in one process each, ours first then torch's first, so
# that both see the same machine load and neither always runs second; best of all per column.
ours1=$("$dir/bench_ckpt" "$dir/ours.pt" "$reps")
theirs1=$("$py" "$here/bench_torch.py" "$dir/torch.pt" "$reps")
echo "round 1: load average $(cut -d' ' -f1-3 /proc/loadavg)"
theirs2=$("$py" "$here/bench_torch.py" "$dir/torch.pt" "$reps")
ours2=$("$dir/bench_ckpt" "$dir/ours.pt" "$reps")
echo "round 2: load average $(cut -d' ' -f1-3 /proc/loadavg)"
ours="$ours1 $ours2" theirs="$theirs1 $theirs2"
rm -f "$dir/ours.pt" "$dir/torch.pt"
"$py" - "$ours" "$theirs" <<'PY'
import json, sys
def best(runs):
    rs = [json.loads(x) for x in runs.replace("} {", "}\n{").splitlines() if x.strip()]
    return {k: min(r[k] for r in rs) for k in rs[0]}
o, t = best(sys.argv[1]), best(sys.argv[2])
for k, what in (("save", "save (fsync'ed)"), ("save_nosync", "save before fsync"), ("load", "load")):
    go, gt = o["gb"] / o[k + "_s"], t["gb"] / t[k + "_s"]
    print("%-18s megatron.c %.3f s = %5.2f GB/s, torch %.3f s = %5.2f GB/s, ratio %.2fx"
          % (what + ":", o[k + "_s"], go, t[k + "_s"], gt, go / gt))
print("final flush+fsync: megatron.c %.3f s (disk writes started during the save), torch %.3f s"
      % (o["sync_s"], t["sync_s"]))
print("state dict: %.3f GB in %d tensors (ours %d)" % (t["gb"], t["tensors"], o["tensors"]))
PY
