"""The committed interleaved-schedule golden (tests/golden/pipeline/interleaved_golden.txt, read
by tests/mpi/test_schedules_interleaved.c) still equals what Megatron's own
forward_backward_pipelining_with_interleaving produces when run live from /work/ref/Megatron-LM (or $MEGATRON_DIR) by make_interleaved_golden.py. Skips
(exit 0, says so) when Megatron is not checked out."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import CHECKS, SRC as src, check_lines, summary  # noqa: E402

mdir = os.environ.get("MEGATRON_DIR", "/work/ref/Megatron-LM")
if not os.path.exists(os.path.join(mdir, "megatron", "core", "pipeline_parallel", "schedules.py")):
    print("test_interleaved_schedule_golden: skipped (no Megatron-LM at %s)" % mdir)
    sys.exit(0)
gdir = os.path.join(src, "tests", "golden", "pipeline")
p = subprocess.run([sys.executable, os.path.join(gdir, "make_interleaved_golden.py"), mdir],
                   capture_output=True, text=True, timeout=300)
live = p.stdout.splitlines()
with open(os.path.join(gdir, "interleaved_golden.txt")) as f:
    golden = f.read().splitlines()
if p.returncode != 0:
    CHECKS.failed += 1
    print("make_interleaved_golden.py failed:", p.stderr[-800:])
check_lines(live, golden)
sys.exit(summary("test_interleaved_schedule_golden"))
