"""Idle waiting (issue 15, finding 2): while one rank of pretrain_gpt is stopped (SIGSTOP), the
healthy ranks wait for it without burning CPU, and the job either resumes when the rank is
continued or ends cleanly by the watchdog when it is not.

Measured from /proc/<pid>/stat (utime + stime over a few seconds) of the healthy rank:
- dp2 (the ranks wait in the gradient / loss all-reduce): CPU while both run (about one core
  each), then while rank 1 is stopped (must be well under a core; before the idle wait of
  parallel_state/comm.c it was a full core until the distributed timeout). Rank 1 is then
  continued (SIGCONT): the run goes on training, ends cleanly on SIGTERM
  (--exit-signal-handler; the run is given far more iterations than it can reach, so that the
  stop lands inside training on a machine of any speed), and the stopped time shows up in the
  timers (--timing-log-level 1: the iteration's elapsed time and the largest timer across
  ranks both hold the stop).
- pp2 (the ranks wait in pipeline send/recv): rank 1 stays stopped; rank 0 idles until the
  distributed timeout (MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS) fires, prints the watchdog message
  and every rank, the stopped one included, is gone soon after."""
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from mc_test import MPIRUN, PRETRAIN, check, summary  # noqa: E402

IDLE_LIMIT = 0.25   # cores a waiting rank may use (idle: ~0.01; spinning: 1.0, or its share)
STOP_S = 3.0
TIMER = re.compile(r"^\s+(\S+) \.+: \((\S+), (\S+)\)")
ELAPSED = re.compile(r"elapsed time per iteration \(ms\): (\S+) \|")


def args(tmp, iters, extra=()):
    return ["--num-layers", "2", "--hidden-size", "32", "--num-attention-heads", "4",
            "--seq-length", "32", "--max-position-embeddings", "32", "--micro-batch-size", "1",
            "--global-batch-size", "4", "--train-iters", str(iters), "--lr", "1e-3",
            "--log-interval", "1", "--eval-iters", "0", "--mock-data",
            "--tokenizer-type", "NullTokenizer", "--vocab-size", "4096",
            "--data-cache-path", os.path.join(tmp, "cache"), *extra]


def start(tmp, np, timeout_s, extra_args, iters):
    out = open(os.path.join(tmp, "out.txt"), "w+")
    cmd = [*MPIRUN, "-np", str(np), "-x", "OMP_NUM_THREADS=1",
           "-x", f"MC_TEST_DISTRIBUTED_TIMEOUT_SECONDS={timeout_s}", "-x", "MC_COMM_STATS=1",
           PRETRAIN,
           *args(tmp, iters, extra_args)]
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True,
                         env=dict(os.environ, OMP_NUM_THREADS="1"), start_new_session=True)
    return p, out


def ranks(mpirun_pid):
    """{world rank: pid} of mpirun's children (the ranks: mpirun forks them on one host)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) != mpirun_pid:
                    continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        for e in env:
            if e.startswith(b"OMPI_COMM_WORLD_RANK="):
                found[int(e.split(b"=", 1)[1])] = int(pid)
    return found


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cores(pid, seconds):
    """CPU cores pid used over the next `seconds` (utime + stime per wall second)."""
    c0, t0 = cpu_s(pid), time.time()
    time.sleep(seconds)
    return (cpu_s(pid) - c0) / (time.time() - t0)


def wait_for(out, text, limit=90):
    t0 = time.time()
    while time.time() - t0 < limit:
        out.seek(0)
        if text in out.read():
            return True
        time.sleep(0.2)
    return False


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def finish(p, limit):
    try:
        p.wait(timeout=limit)
        return p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        return None


def logged(out):
    """The iterations the run has logged so far."""
    out.seek(0)
    return len(re.findall(r"iteration +\d+/ +\d+ \|", out.read()))


def stopped_then_continued(tmp):
    """dp2: stop rank 1 for STOP_S, measure rank 0, continue; the run trains on and exits on
    SIGTERM."""
    iters = 1000000
    p, out = start(tmp, 2, 60, ["--timing-log-level", "1", "--exit-signal-handler"], iters)
    try:
        ok = wait_for(out, "iteration       30/")
        pids = ranks(p.pid)
        check(ok and len(pids) == 2, f"dp2: the run is training with two ranks ({pids})")
        if not (ok and len(pids) == 2):
            return
        busy = cores(pids[0], 1.5)
        os.kill(pids[1], signal.SIGSTOP)
        time.sleep(0.5)  # rank 0 reaches the next collective and settles into the wait
        at_stop = logged(out)
        idle = cores(pids[0], STOP_S - 0.5)
        stalled = logged(out) - at_stop
        os.kill(pids[1], signal.SIGCONT)
        print(f"dp2: healthy rank 0 used {busy:.2f} cores while both ran, {idle:.2f} while "
              f"rank 1 was stopped ({stalled} iterations logged meanwhile)", flush=True)
        check(idle < IDLE_LIMIT, f"dp2: rank 0 waits idle for the stopped rank 1 ({idle:.2f} "
                                 f"cores, limit {IDLE_LIMIT})")
        check(stalled <= 1, f"dp2: training stalls while rank 1 is stopped ({stalled} iterations)")
        t0 = time.time()
        while logged(out) < at_stop + 30 and time.time() - t0 < 60 and p.poll() is None:
            time.sleep(0.2)
        resumed = logged(out) - at_stop
        for pid in pids.values():
            os.kill(pid, signal.SIGTERM)
        rc = finish(p, 60)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    out.seek(0)
    text = out.read()
    lines = text.splitlines()
    check(rc == 0 and resumed >= 30 and "exiting program after receiving SIGTERM." in text,
          f"dp2: continued, the run trains on ({resumed} more iterations) and ends cleanly on "
          f"SIGTERM (rc {rc}: {text[-400:]})")
    # the slow iteration's elapsed time and its largest timer (reported)
    worst_it, worst_timer = 0.0, 0.0
    for i, l in enumerate(lines):
        m = ELAPSED.search(l)
        if m and float(m.group(1)) > worst_it:
            worst_it = float(m.group(1))
            block = [TIMER.match(x) for x in lines[i + 1:i + 12]]
            worst_timer = max([float(b.group(3)) for b in block if b] or [0.0])
    # Where rank 1 stops decides which wait of rank 0's it lands in: one inside a Megatron
    # timer (forward-backward, the grad reduction, the optimizer) or one that no Megatron timer
    # brackets (the logging reductions); every wait is counted in rank 0's comm-wait line.
    m = re.search(r"comm-wait rank=0 waits=\S+ wait_s=(\S+)", text)
    waited = float(m.group(1)) * 1000 if m else 0.0
    print(f"dp2: slowest iteration {worst_it:.0f} ms, its largest timer (max over ranks) "
          f"{worst_timer:.0f} ms, rank 0's MPI waits {waited:.0f} ms in all, rank 1 stopped "
          f"{STOP_S * 1000:.0f} ms", flush=True)
    check(worst_it >= 0.9 * STOP_S * 1000 and waited >= 0.9 * STOP_S * 1000,
          f"dp2: the stopped time shows in the iteration time ({worst_it:.0f} ms) and in "
          f"rank 0's MPI waits ({waited:.0f} ms)")


def stopped_until_timeout(tmp):
    """pp2: rank 1 stays stopped; the watchdog on rank 0 ends the job."""
    timeout = 6
    p, out = start(tmp, 2, timeout, ["--pipeline-model-parallel-size", "2"], 100000)
    try:
        ok = wait_for(out, "iteration       20/")
        pids = ranks(p.pid)
        check(ok and len(pids) == 2, f"pp2: the run is training with two ranks ({pids})")
        if not (ok and len(pids) == 2):
            return
        os.kill(pids[1], signal.SIGSTOP)
        t0 = time.time()
        time.sleep(0.5)
        idle = cores(pids[0], 3.0)
        print(f"pp2: healthy rank 0 used {idle:.2f} cores while rank 1 was stopped", flush=True)
        check(idle < IDLE_LIMIT, f"pp2: rank 0 waits idle in pipeline send/recv ({idle:.2f} "
                                 f"cores, limit {IDLE_LIMIT})")
        rc = finish(p, timeout + 30)
        gone = time.time() - t0
        print(f"pp2: every rank gone {gone:.1f} s after the stop (timeout {timeout} s)",
              flush=True)
        check(rc not in (0, None) and not any(alive(x) for x in pids.values()),
              f"pp2: the job ends with an error and no rank left (rc {rc}, {gone:.1f} s)")
        check(timeout <= gone < timeout + 20, f"pp2: it ends by the timeout ({gone:.1f} s)")
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    out.seek(0)
    text = out.read()
    check(text.count("longer than the distributed timeout") == 1 and "megatron.c: rank 0: " in text,
          f"pp2: rank 0's watchdog reports the wait once ({text[-600:]})")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        stopped_then_continued(tmp)
        stopped_until_timeout(tmp)
    return summary("test_idle_wait")


if __name__ == "__main__":
    sys.exit(main())
