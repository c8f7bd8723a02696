"""mc_pp_in_flight (the activation slots each model chunk gets) against Megatron's own step
order: for every training schedule in tests/golden/pipeline/interleaved_golden.txt and
schedules_golden.txt (recorded from Megatron-LM core_v0.12.1's schedules, see the README there),
the peak number of micro-batches each chunk holds between its forward F<chunk>.<k> (F<k> for
1F1B) and its backward must equal what build/tests/pp_in_flight prints."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import BUILD, SRC, check, summary  # noqa: E402

DRIVER = os.path.join(BUILD, "tests", "pp_in_flight")
GOLD = os.path.join(SRC, "tests", "golden", "pipeline")


def peaks(events, vp):
    live, peak = [0] * vp, [0] * vp
    for ev in events:
        m = re.fullmatch(r"([FB])(?:(\d+)\.)?(\d+)", ev)
        if not m:
            continue
        c = int(m.group(2) or 0)
        live[c] += 1 if m.group(1) == "F" else -1
        peak[c] = max(peak[c], live[c])
    return peak


def main():
    cases = 0
    head = re.compile(r"interleaved pp=(\d+) vp=(\d+) N=(\d+) M=(\d+) \S+ train rank=(\d+) : (.*)")
    for line in open(os.path.join(GOLD, "interleaved_golden.txt")):
        m = head.match(line.strip())
        if not m or m.group(6).startswith("error"):
            continue
        pp, vp, n, mb, rank = map(int, m.groups()[:5])
        want = peaks(m.group(6).split(), vp)
        got = subprocess.run([DRIVER, str(pp), str(rank), str(vp), str(mb), str(n)],
                             capture_output=True, text=True)
        check(got.returncode == 0 and got.stdout.split() == [str(x) for x in want],
              f"pp{pp} vp{vp} N{n} M{mb} rank {rank}: {got.stdout.strip()} {got.stderr.strip()}"
              f" vs Megatron's order {want}")
        cases += 1
    check(cases >= 20, f"{cases} interleaved training schedules in the golden")
    one = re.compile(r"1f1b pp=(\d+) rank=(\d+) M=(\d+) train : (.*)")
    n1 = 0
    for line in open(os.path.join(GOLD, "schedules_golden.txt")):
        m = one.match(line.strip())
        if not m:
            continue
        pp, rank, mb = map(int, m.groups()[:3])
        want = peaks(m.group(4).split(), 1)
        got = subprocess.run([DRIVER, str(pp), str(rank), "1", str(mb), "0"],
                             capture_output=True, text=True)
        check(got.returncode == 0 and got.stdout.split() == [str(want[0])],
              f"1F1B pp{pp} M{mb} rank {rank}: {got.stdout.strip()} vs Megatron's order {want}")
        n1 += 1
    check(n1 >= 10, f"{n1} 1F1B training schedules in the golden")
    cases += n1
    return summary("test_in_flight_golden", f"({cases} schedules)")


if __name__ == "__main__":
    sys.exit(main())
