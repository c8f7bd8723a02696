"""The committed rank-layout golden (tests/golden/parallel/rank_layout.txt, read by
tests/mpi/test_parallel_state.c) still equals what Megatron's own RankGenerator produces when
run live from /work/ref/Megatron-LM (or $MEGATRON_DIR). Skips (exit 0, says so) when Megatron
is not checked out."""
import os
import sys

import megatron_rank_layout_path  # noqa: F401  (puts tests/parallel on sys.path)
from megatron_rank_layout import layout_lines

mdir = os.environ.get("MEGATRON_DIR", "/work/ref/Megatron-LM")
src = os.environ.get("MC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
if not os.path.exists(os.path.join(mdir, "megatron", "core", "parallel_state.py")):
    print("test_rank_layout_golden: skipped (no Megatron-LM at %s)" % mdir)
    sys.exit(0)
live = layout_lines(mdir)
with open(os.path.join(src, "tests", "golden", "parallel", "rank_layout.txt")) as f:
    golden = f.read().splitlines()
passed = failed = 0
for i, (a, b) in enumerate(zip(live, golden)):
    if a == b:
        passed += 1
    else:
        failed += 1
        if failed <= 3:
            print("line %d differs:\n  megatron %s\n  golden   %s" % (i + 1, a[:200], b[:200]))
if len(live) != len(golden):
    failed += 1
    print("line counts differ: megatron %d, golden %d" % (len(live), len(golden)))
print("test_rank_layout_golden: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
