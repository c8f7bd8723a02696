"""The committed rank-layout golden (tests/golden/parallel/rank_layout.txt, read by
tests/mpi/test_parallel_state.c) still equals what Megatron's own RankGenerator produces when
run live from /work/ref/Megatron-LM (or $MEGATRON_DIR). Skips (exit 0, says so) when Megatron
is not checked out."""
import os
import sys

import megatron_rank_layout_path  # noqa: F401  (puts tests/parallel on sys.path)
from megatron_rank_layout import layout_lines

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import SRC as src, check_lines, summary  # noqa: E402

mdir = os.environ.get("MEGATRON_DIR", "/work/ref/Megatron-LM")
if not os.path.exists(os.path.join(mdir, "megatron", "core", "parallel_state.py")):
    print("test_rank_layout_golden: skipped (no Megatron-LM at %s)" % mdir)
    sys.exit(0)
live = layout_lines(mdir)
with open(os.path.join(src, "tests", "golden", "parallel", "rank_layout.txt")) as f:
    golden = f.read().splitlines()
check_lines(live, golden)
sys.exit(summary("test_rank_layout_golden"))
