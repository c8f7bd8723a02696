"""The committed interleaved-schedule golden (tests/golden/pipeline/interleaved_golden.txt, read
by tests/mpi/test_schedules_interleaved.c) still equals what Megatron's own
forward_backward_pipelining_with_interleaving produces when run live from /work/ref/Megatron-LM (or $MEGATRON_DIR) by make_interleaved_golden.py. Skips
(exit 0, says so) when Megatron is not checked out."""
import os
import subprocess
import sys

mdir = os.environ.get("MEGATRON_DIR", "/work/ref/Megatron-LM")
src = os.environ.get("MC_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
if not os.path.exists(os.path.join(mdir, "megatron", "core", "pipeline_parallel", "schedules.py")):
    print("test_interleaved_schedule_golden: skipped (no Megatron-LM at %s)" % mdir)
    sys.exit(0)
gdir = os.path.join(src, "tests", "golden", "pipeline")
p = subprocess.run([sys.executable, os.path.join(gdir, "make_interleaved_golden.py"), mdir],
                   capture_output=True, text=True, timeout=300)
live = p.stdout.splitlines()
with open(os.path.join(gdir, "interleaved_golden.txt")) as f:
    golden = f.read().splitlines()
passed = failed = 0
if p.returncode != 0:
    failed += 1
    print("make_interleaved_golden.py failed:", p.stderr[-800:])
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
print("test_interleaved_schedule_golden: %d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
