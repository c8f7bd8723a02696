#!/bin/sh
# torch_dist checkpoint save/load throughput: our save/load (bench_dist.c, the library's
# torch_dist path of pretrain_gpt, built by CMake as build/bench/bench_dist) beside torch 2's
# torch.distributed.checkpoint save/load of a state dict of the same size and names (GPT-2-124M
# model + Adam state, ~1.5 GB fp32), in one run, same disk; best of 2 x REPEATS.
# Usage: bench/checkpoint/run_dist.sh [REPEATS=3]
#   env: BUILD=build, PYTHON (torch >= 2.2; default: bench/setup_torch.sh's), CKPT_DIR
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
reps=${1:-3}
py=${PYTHON:-$("$root/bench/setup_torch.sh")}
dir=${CKPT_DIR:-$build/bench-ckpt}
ours_bin=$build/bench/bench_dist
[ -x "$ours_bin" ] || { echo "run_dist.sh: no $ours_bin; build the project first" >&2; exit 1; }
mkdir -p "$dir"
echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load average $(cut -d' ' -f1-3 /proc/loadavg), torch $("$py" -c 'import torch; print(torch.__version__)')"
# ours first then torch's, then the other way round: both see the same machine load
ours1=$("$ours_bin" "$dir/ours_dist" "$reps" 2>/dev/null)
theirs1=$("$py" -W ignore "$here/bench_dist_torch.py" "$dir/torch_dcp" "$reps")
echo "round 1: load average $(cut -d' ' -f1-3 /proc/loadavg)"
theirs2=$("$py" -W ignore "$here/bench_dist_torch.py" "$dir/torch_dcp" "$reps")
ours2=$("$ours_bin" "$dir/ours_dist" "$reps" 2>/dev/null)
echo "round 2: load average $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" - "$ours1
$ours2" "$theirs1
$theirs2" <<'PY'
import json, sys
def best(runs):
    rs = [json.loads(x) for x in runs.splitlines() if x.strip()]
    return {k: min(r[k] for r in rs) if isinstance(rs[0][k], float) else rs[0][k] for k in rs[0]}
o, t = best(sys.argv[1]), best(sys.argv[2])
for k, what in (("save", "save (fsync'ed)"), ("load", "load")):
    go, gt = o["gb"] / o[k + "_s"], t["gb"] / t[k + "_s"]
    print("torch_dist %-16s megatron.c %.3f s = %5.2f GB/s, torch %s DCP %.3f s = %5.2f GB/s, "
          "ratio %.2fx" % (what + ":", o[k + "_s"], go, t["torch"], t[k + "_s"], gt, go / gt))
print("state dict: %.3f GB in %d tensors (ours %.3f GB in %d)" % (t["gb"], t["tensors"], o["gb"],
                                                                 o["tensors"]))
PY
